"""The reflector's Lua: one shard's publish, and its fenced checkpoint operations.

Each script is one atomic step on keys that share one Cluster hash tag (a shard's
:class:`~common.redis_layout.ShardKeys`). The rules they enforce -- the leader fence, the
checkpoint rule and the per-key rules that make every publish idempotent -- are specified in
``docs/architecture.md`` and explained where they are used, in :mod:`reflector_svc.publisher`;
the two halves of a move between shards, and why a checkpoint forgets a pending one, in
:mod:`reflector_svc.moves`.
Hash field names are this package's (:mod:`common.redis_layout.names`), written into the
scripts here so that the Lua and the Python readers of a checkpoint cannot drift apart.

Both scripts start with ``#!lua`` (the Redis 7 shebang): Redis then refuses the whole call up
front under ``maxmemory`` pressure instead of failing at the first write inside it, so a call
applies entirely or not at all; it also means a script may only touch the keys it declares.
"""

from __future__ import annotations

from string import Template
from typing import Final

from common.redis_layout.lua import LuaScript
from common.redis_layout.names import (
    CHECKPOINT_FENCE,
    CHECKPOINT_RELISTING,
    CHECKPOINT_RV,
    CHECKPOINT_SYNCED_AT,
    CHECKPOINT_SYNCED_RV,
    STREAM_FIELD,
)

__all__ = ["CHECKPOINT_LUA", "PUBLISH_LUA", "moving_entry", "parse_moving"]


def _with_names(script: str) -> LuaScript:
    """``script`` with the checkpoint hash's and the stream entry's field names put in for
    ``$RV``, ``$FENCE``, ... ``$FIELD``."""
    text = Template(script).substitute(
        RV=CHECKPOINT_RV,
        FENCE=CHECKPOINT_FENCE,
        SYNCED_RV=CHECKPOINT_SYNCED_RV,
        SYNCED_AT=CHECKPOINT_SYNCED_AT,
        RELISTING=CHECKPOINT_RELISTING,
        FIELD=STREAM_FIELD,
    )
    return LuaScript(text)


# Shared by both scripts: exact comparison of unsigned decimal integers given as strings.
# Goes through _with_names with them, hence "$$" for the pattern anchor "$".
_LUA_DIGITS: Final = r"""
local function digits(s)
  -- s without leading zeros when it is an unsigned decimal integer, else nil
  if not s or not string.find(s, '^%d+$$') then return nil end
  local t = string.gsub(s, '^0+', '')
  return t
end
local function cmp(a, b)
  -- -1, 0, 1 for two results of digits(): longer is larger, same length compares bytewise
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
"""

PUBLISH_LUA: Final = _with_names(
    "#!lua\n"
    + _LUA_DIGITS
    + r"""
-- One shard's part of one (sub-)batch.
-- KEYS: 1 stream, 2 versions, 3 objects, 4 checkpoint, 5 moving (one hash tag).
-- ARGV: 1 epoch, 2 '1' for the replay rule (watch batches) else '0', 3 the rv to move the
--       checkpoint to ('' leaves it), then per delta 4 values: kind, key, rv, envelope.
--       kind: 'U' upsert, 'D' deletion, 'O<to>' the outgoing half of a move to shard <to>
--       (a deletion that also records itself in `moving`, under the move's rv).
-- Returns {0, fence} when fenced (nothing written), else {1, id_1, ..., id_n}: the stream ID
-- of each delta, '' for a skipped one.
local stream, versions, objects, checkpoint = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local state = redis.call('HMGET', checkpoint, '$FENCE', '$RV')
local fence = state[1] or '0'
local order = cmp(digits(ARGV[1]), digits(fence) or '')
if order < 0 then return {0, fence} end
if order > 0 then redis.call('HSET', checkpoint, '$FENCE', ARGV[1]) end
local current = digits(state[2])
local replay_below = nil
if ARGV[2] == '1' then replay_below = current end
local out = {1}
for i = 4, #ARGV, 4 do
  local kind, key, rv, envelope = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local upsert = kind == 'U'
  local n = digits(rv)
  local skip = upsert and replay_below ~= nil and n ~= nil and cmp(n, replay_below) <= 0
  if not skip then
    local known = redis.call('HGET', versions, key)
    if known then
      local k = digits(known)
      if not upsert then
        skip = k ~= nil and n ~= nil and cmp(k, n) > 0
      elseif k ~= nil and n ~= nil then
        skip = cmp(k, n) >= 0
      else
        skip = known == rv
      end
    else
      skip = not upsert
    end
  end
  local id = ''
  if not skip then
    id = redis.call('XADD', stream, '*', '$FIELD', envelope)
    if upsert then
      redis.call('HSET', versions, key, rv)
      redis.call('HSET', objects, key, envelope)
    else
      redis.call('HDEL', versions, key)
      redis.call('HDEL', objects, key)
      if kind ~= 'D' then
        redis.call('HSET', KEYS[5], key, string.sub(kind, 2) .. ' ' .. id .. ' ' .. rv)
      end
    end
  end
  out[#out + 1] = id
end
if ARGV[3] ~= '' then
  local new = digits(ARGV[3])
  if current == nil or new == nil or cmp(new, current) > 0 then
    redis.call('HSET', checkpoint, '$RV', ARGV[3])
  end
end
return out
"""
)
"""The publish script: per shard, fence check, checkpoint rule, per-key rules, then XADD and
the known state (rules 1 and 2 of :mod:`reflector_svc.publisher`); an outgoing half of a move
is a deletion that also leaves its entry in ``moving`` (:func:`parse_moving`).

The replay rule and the checkpoint move are separate arguments because a watch batch with
moves is written as several sub-batches: every one of them needs the replay rule, but the ones
that end with an outgoing half must not vouch for the move's RV yet (its incoming half is not
written), so they move the checkpoint only up to the event before it, or not at all."""


def moving_entry(to_shard: int, stream_id: str, rv: str) -> str:
    """A ``moving`` hash value as the publish script writes it: ``"<to> <id> <rv>"``."""
    return f"{to_shard} {stream_id} {rv}"


def parse_moving(value: str) -> tuple[int, str, str] | None:
    """``(to shard, stream id of the outgoing half, the move's rv)`` of a ``moving`` value;
    ``None`` when it is not one (the rv is the rest of the value: it may hold anything)."""
    to_shard, _, rest = value.partition(" ")
    stream_id, space, rv = rest.partition(" ")
    if not (to_shard.isascii() and to_shard.isdigit() and stream_id and space):
        return None
    return int(to_shard), stream_id, rv


CHECKPOINT_LUA: Final = _with_names(
    "#!lua\n"
    + _LUA_DIGITS
    + r"""
-- Fenced checkpoint operations on one shard. KEYS: 1 checkpoint, 2 moving.
-- ARGV: 1 epoch, 2 op, 3 rv. op: 'fence' raise the fence; 'advance' rv = max(rv, ARGV[3])
-- and forget the moves in `moving` at or below ARGV[3] (every event up to it is published,
-- incoming halves included); 'begin' relisting = 1; 'finish' rv = synced_rv = ARGV[3],
-- relisting = 0, synced_at = now (ms, Redis clock: when the last relist finished, for
-- `informer-bus status`), and forget every move (the relist published every object where
-- its state maps to).
-- Returns {0, fence} when a newer epoch fenced the shard (nothing written), else {1}.
local checkpoint, op = KEYS[1], ARGV[2]
local fence = redis.call('HGET', checkpoint, '$FENCE') or '0'
local order = cmp(digits(ARGV[1]), digits(fence) or '')
if order < 0 then return {0, fence} end
if order > 0 then redis.call('HSET', checkpoint, '$FENCE', ARGV[1]) end
if op == 'advance' then
  local current = digits(redis.call('HGET', checkpoint, '$RV'))
  local new = digits(ARGV[3])
  if current == nil or new == nil or cmp(new, current) > 0 then
    redis.call('HSET', checkpoint, '$RV', ARGV[3])
  end
  if new ~= nil then
    local moving = redis.call('HGETALL', KEYS[2])  -- almost always empty
    for j = 1, #moving, 2 do
      local r = digits(string.match(moving[j + 1], '^%S+ %S+ (.*)$$'))
      if r ~= nil and cmp(r, new) <= 0 then redis.call('HDEL', KEYS[2], moving[j]) end
    end
  end
elseif op == 'begin' then
  redis.call('HSET', checkpoint, '$RELISTING', '1')
elseif op == 'finish' then
  local now = redis.call('TIME')
  local now_ms = tostring(tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  redis.call('HSET', checkpoint, '$RV', ARGV[3], '$SYNCED_RV', ARGV[3], '$RELISTING', '0',
             '$SYNCED_AT', now_ms)
  redis.call('DEL', KEYS[2])
elseif op ~= 'fence' then
  return redis.error_reply('unknown checkpoint op ' .. op)
end
return {1}
"""
)
"""Fenced writes of a shard's checkpoint hash; every op also raises the fence to the caller's
epoch when that is newer (the fence is "the highest leader epoch seen")."""
