"""The fenced Lua scripts of a shard's consumer group: the reads and acknowledgements.

Every command that changes the consumer group -- reads included, since ``XREADGROUP`` moves the
group's last-delivered ID -- runs inside one of these scripts, which first checks that the shard
lease (``ShardKeys.lease``, written by :class:`common.lease.RedisLease`) still names the caller
and its epoch. A stale owner (paused past its lease) can therefore neither acknowledge nor pull
entries out from under the new owner. ``processor_svc.fenced_stream`` is their one caller.

Every script reply is ``{0, holder, epoch}`` when the lease is not the caller's (what it names
instead, ``''`` for a missing field), and ``{1, ...}`` after doing their work.

**The held set** (``GroupShardKeys.held``): the keys the group's handlers hold. Each script that
acknowledges also takes the held set's changes that belong to the entries it acknowledges (a
key that entered the view: set, with its state; a key that left it or was deleted: removed), so
a change and its acknowledgement happen in one atomic step: the held set always describes
exactly the acknowledged prefix of the stream. Changes come as ``n``, ``n`` key/value pairs to
set, ``m``, ``m`` keys to remove; the caller folds a batch's changes per key first (the last
one wins), so sets and removals never name the same key.
"""

from __future__ import annotations

from typing import Final

from common.redis_layout.lua import LuaScript
from common.redis_layout.names import LEASE_EPOCH, LEASE_HOLDER

__all__ = ["FENCED_ACK", "FENCED_HELD", "FENCED_READ"]

# The lease check every fenced script starts with. KEYS[1] lease, ARGV[1] holder, ARGV[2] epoch.
_CHECK_LEASE: Final = f"""
local lease = redis.call('HMGET', KEYS[1], '{LEASE_HOLDER}', '{LEASE_EPOCH}')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then
  return {{0, lease[1] or '', lease[2] or ''}}
end
"""

# Applies the held set's changes that start at ARGV[i] to the hash KEYS[held]; leaves ``i``
# after them. In chunks: unpack() is bounded by Lua's C stack.
_APPLY_HELD: Final = """
local function apply_held(held, i)
  local n = tonumber(ARGV[i])
  i = i + 1
  local last = i + 2 * n - 1
  while i <= last do
    local stop = math.min(i + 999, last)
    redis.call('HSET', held, unpack(ARGV, i, stop))
    i = stop + 1
  end
  n = tonumber(ARGV[i])
  i = i + 1
  last = i + n - 1
  while i <= last do
    local stop = math.min(i + 999, last)
    redis.call('HDEL', held, unpack(ARGV, i, stop))
    i = stop + 1
  end
  return i
end
"""

FENCED_READ: Final = LuaScript(
    "#!lua\n"
    + _CHECK_LEASE
    + _APPLY_HELD
    + """
-- KEYS: 1 lease, 2 stream, 3 held set. ARGV: 1 holder, 2 epoch, 3 group, 4 consumer, 5 count,
-- 6 '>' for new entries, or an ID to replay this consumer's pending entries after it;
-- 7... the held set's changes of the entries acknowledged here; then the IDs to acknowledge
-- first (the previous batches', carried here to save a round trip).
-- Returns {0, holder, epoch} when the lease is not ours, else {1, entries}.
local i = apply_held(KEYS[3], 7)
while i <= #ARGV do
  local last = math.min(i + 999, #ARGV)
  redis.call('XACK', KEYS[2], ARGV[3], unpack(ARGV, i, last))
  i = last + 1
end
local r = redis.call('XREADGROUP', 'GROUP', ARGV[3], ARGV[4], 'COUNT', ARGV[5],
                     'STREAMS', KEYS[2], ARGV[6])
if not r then return {1, {}} end
return {1, r[1][2]}
"""
)
"""Acknowledge, then read a batch: ``XACK`` before ``XREADGROUP``, one round trip per batch.

KEYS: 1 the shard lease, 2 the shard stream, 3 the group's held set. ARGV: 1 holder, 2 epoch,
3 group, 4 consumer, 5 count, 6 ``>`` for new entries or an ID to replay the consumer's pending
entries after it, 7... the held set's changes (module docstring), then the IDs to acknowledge
first. Replies ``{1, entries}``."""

FENCED_ACK: Final = LuaScript(
    "#!lua\n"
    + _CHECK_LEASE
    + _APPLY_HELD
    + """
-- KEYS: 1 lease, 2 stream, 3 dead letters, 4 held set. ARGV: 1 holder, 2 epoch, 3 group,
-- 4 dead-letter maxlen, 5 setid ('' for none), 6 entries-read for setid ('' if unknown),
-- 7 number of dead letters, then per dead letter: n, then n field/value pairs; then the held
-- set's changes; then the IDs to acknowledge.
-- With a setid, also acknowledges every pending entry up to it. Returns {1, acknowledged}.
local stream, group = KEYS[2], ARGV[3]
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  local n = tonumber(ARGV[i])
  local args = {'XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*'}
  for j = i + 1, i + 2 * n do args[#args + 1] = ARGV[j] end
  redis.call(unpack(args))
  i = i + 1 + 2 * n
end
i = apply_held(KEYS[4], i)
local acked = 0
if ARGV[5] ~= '' then
  if ARGV[6] ~= '' then
    redis.call('XGROUP', 'SETID', stream, group, ARGV[5], 'ENTRIESREAD', ARGV[6])
  else
    redis.call('XGROUP', 'SETID', stream, group, ARGV[5])
  end
  while true do
    local pending = redis.call('XPENDING', stream, group, '-', ARGV[5], 1000)
    if #pending == 0 then break end
    local ids = {}
    for _, p in ipairs(pending) do ids[#ids + 1] = p[1] end
    acked = acked + redis.call('XACK', stream, group, unpack(ids))
  end
end
while i <= #ARGV do
  local last = math.min(i + 999, #ARGV)
  acked = acked + redis.call('XACK', stream, group, unpack(ARGV, i, last))
  i = last + 1
end
return {1, acked}
"""
)
"""Park dead letters and acknowledge, in one step: an entry is parked if and only if it is
acknowledged. With a ``setid`` (a takeover's commit) it also moves the group to that ID and
acknowledges every pending entry up to it.

KEYS: 1 the shard lease, 2 the shard stream, 3 the dead-letter stream, 4 the group's held set.
ARGV: 1 holder, 2 epoch, 3 group, 4 the dead-letter stream's approximate ``MAXLEN``, 5 the
``XGROUP SETID`` ID (``''``: none), 6 its ``ENTRIESREAD`` (``''``: unknown), 7 the number of
dead letters, then per dead letter its number of field/value pairs and the pairs; then the held
set's changes (module docstring); then the IDs to acknowledge. Replies ``{1, acknowledged}``."""

FENCED_HELD: Final = LuaScript(
    "#!lua\n"
    + _CHECK_LEASE
    + _APPLY_HELD
    + """
-- KEYS: 1 lease, 2 held set. ARGV: 1 holder, 2 epoch, 3... the held set's changes.
apply_held(KEYS[2], 3)
return {1}
"""
)
"""Change the held set alone, fenced: a takeover records what its initial list told the
handlers (in chunks, before its commit moves the group; every chunk is true once the handlers
processed the list, so a crash between chunks leaves a held set that is still right).

KEYS: 1 the shard lease, 2 the group's held set. ARGV: 1 holder, 2 epoch, 3... the held set's
changes (module docstring). Replies ``{1}``."""
