"""The reflector's Lua: one shard's publish, and its fenced checkpoint operations.

Each script is one atomic step on keys that share one Cluster hash tag (a shard's
:class:`~common.redis_layout.ShardKeys`). The rules they enforce -- the leader fence, the
checkpoint rule and the per-key rules that make every publish idempotent -- are specified in
``docs/architecture.md`` and explained where they are used, in :mod:`reflector_svc.publisher`.
Hash field names are this package's (:mod:`common.redis_layout.names`), written into the
scripts here so that the Lua and the Python readers of a checkpoint cannot drift apart.

Both scripts start with ``#!lua`` (the Redis 7 shebang): Redis then refuses the whole call up
front under ``maxmemory`` pressure instead of failing at the first write inside it, so a call
applies entirely or not at all; it also means a script may only touch the keys it declares.
"""

from __future__ import annotations

from string import Template
from typing import Final

from common.redis_layout.names import (
    CHECKPOINT_FENCE,
    CHECKPOINT_RELISTING,
    CHECKPOINT_RV,
    CHECKPOINT_SYNCED_AT,
    CHECKPOINT_SYNCED_RV,
)

__all__ = ["CHECKPOINT_LUA", "PUBLISH_LUA"]


def _with_names(script: str) -> str:
    """``script`` with the checkpoint hash's field names put in for ``$RV``, ``$FENCE``..."""
    return Template(script).substitute(
        RV=CHECKPOINT_RV,
        FENCE=CHECKPOINT_FENCE,
        SYNCED_RV=CHECKPOINT_SYNCED_RV,
        SYNCED_AT=CHECKPOINT_SYNCED_AT,
        RELISTING=CHECKPOINT_RELISTING,
    )


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
-- One shard's group of one batch.
-- KEYS: 1 stream, 2 versions, 3 objects, 4 checkpoint (one hash tag).
-- ARGV: 1 epoch, 2 '1' to set the checkpoint else '0', 3 checkpoint rv,
--       then per delta 4 values: kind ('U' upsert, 'D' deletion), key, rv, envelope.
-- Returns {0, fence} when fenced (nothing written), else {1, id_1, ..., id_n}: the stream ID
-- of each delta, '' for a skipped one.
local stream, versions, objects, checkpoint = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local state = redis.call('HMGET', checkpoint, '$FENCE', '$RV')
local fence = state[1] or '0'
local order = cmp(digits(ARGV[1]), digits(fence) or '')
if order < 0 then return {0, fence} end
if order > 0 then redis.call('HSET', checkpoint, '$FENCE', ARGV[1]) end
local moves = ARGV[2] == '1'
local current = digits(state[2])
local replay_below = nil
if moves then replay_below = current end
local out = {1}
for i = 4, #ARGV, 4 do
  local kind, key, rv, envelope = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n = digits(rv)
  local skip = kind ~= 'D' and replay_below ~= nil and n ~= nil and cmp(n, replay_below) <= 0
  if not skip then
    local known = redis.call('HGET', versions, key)
    if known then
      local k = digits(known)
      if kind == 'D' then
        skip = k ~= nil and n ~= nil and cmp(k, n) > 0
      elseif k ~= nil and n ~= nil then
        skip = cmp(k, n) >= 0
      else
        skip = known == rv
      end
    else
      skip = kind == 'D'
    end
  end
  local id = ''
  if not skip then
    id = redis.call('XADD', stream, '*', 'd', envelope)
    if kind == 'D' then
      redis.call('HDEL', versions, key)
      redis.call('HDEL', objects, key)
    else
      redis.call('HSET', versions, key, rv)
      redis.call('HSET', objects, key, envelope)
    end
  end
  out[#out + 1] = id
end
if moves then
  local new = digits(ARGV[3])
  if current == nil or new == nil or cmp(new, current) > 0 then
    redis.call('HSET', checkpoint, '$RV', ARGV[3])
  end
end
return out
"""
)
"""The publish script: per shard, fence check, checkpoint rule, per-key rules, then XADD and
the known state (rules 1 and 2 of :mod:`reflector_svc.publisher`)."""

CHECKPOINT_LUA: Final = _with_names(
    "#!lua\n"
    + _LUA_DIGITS
    + r"""
-- Fenced checkpoint operations on one shard. KEYS: 1 checkpoint.
-- ARGV: 1 epoch, 2 op, 3 rv. op: 'fence' raise the fence; 'advance' rv = max(rv, ARGV[3]);
-- 'begin' relisting = 1; 'finish' rv = synced_rv = ARGV[3], relisting = 0, synced_at = now
-- (ms, Redis clock: when the last relist finished, for `informer-bus status`).
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
elseif op == 'begin' then
  redis.call('HSET', checkpoint, '$RELISTING', '1')
elseif op == 'finish' then
  local now = redis.call('TIME')
  local now_ms = tostring(tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  redis.call('HSET', checkpoint, '$RV', ARGV[3], '$SYNCED_RV', ARGV[3], '$RELISTING', '0',
             '$SYNCED_AT', now_ms)
elseif op ~= 'fence' then
  return redis.error_reply('unknown checkpoint op ' .. op)
end
return {1}
"""
)
"""Fenced writes of a shard's checkpoint hash; every op also raises the fence to the caller's
epoch when that is newer (the fence is "the highest leader epoch seen")."""
