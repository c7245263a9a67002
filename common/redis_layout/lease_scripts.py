"""The lease scripts (:mod:`common.lease`): a lease hash ``{holder, epoch}`` and its epoch counter.

Every lease informer-bus holds -- the reflector leader's ``ib:{R}:leader`` with ``ib:{R}:epoch``,
each shard's ``ib:{R:S}:lease`` with ``ib:{R:S}:lease_epoch`` -- is written by these scripts
only, so the fields (:data:`common.redis_layout.names.LEASE_HOLDER`, ``LEASE_EPOCH``) and the
epoch rules live in one place. The two keys share a Cluster hash tag, so one script may touch
both.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ACQUIRE_OR_RENEW", "READ", "RELEASE", "RENEW"]

# KEYS[1] lease hash {holder, epoch}, KEYS[2] epoch counter; ARGV[1] holder, ARGV[2] duration ms,
# ARGV[3] the epoch the caller held last (0: none); a new epoch is always above it, even when
# Redis lost the counter (restarted without persistence), so a lapsed holder always sees that
# its lease changed hands. Returns {held 0|1, epoch, holder, ttl ms (-1: no expiry)}.
ACQUIRE_OR_RENEW: Final = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0, holder, tonumber(ARGV[2])}
end
if holder then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0, holder,
          redis.call('PTTL', KEYS[1])}
end
local epoch = redis.call('INCR', KEYS[2])
if epoch <= (tonumber(ARGV[3]) or 0) then
  epoch = tonumber(ARGV[3]) + 1
  redis.call('SET', KEYS[2], epoch)
end
redis.call('PERSIST', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'epoch', epoch)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, epoch, ARGV[1], tonumber(ARGV[2])}
"""

# KEYS[1] lease hash; ARGV[1] holder, ARGV[2] duration ms, ARGV[3] the epoch we hold. Renews
# only that very lease, never takes a free one: whoever owned the lapsed lease must stop before
# a new ownership (and a new epoch) begins. Returns {held 0|1, epoch (0: none), holder ('':
# none), ttl ms}.
RENEW: Final = """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'epoch')
if lease[1] == ARGV[1] and tonumber(lease[2]) == tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(lease[2]), lease[1], tonumber(ARGV[2])}
end
if lease[1] then
  return {0, tonumber(lease[2]) or 0, lease[1], redis.call('PTTL', KEYS[1])}
end
return {0, 0, '', -2}
"""

# KEYS[1] lease hash; ARGV[1] holder. Returns 1 if the lease was ours and is now deleted.
RELEASE: Final = """
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] lease hash, KEYS[2] epoch counter. Returns {holder or '', epoch}: the lease's epoch
# while held, else the last epoch issued (0 if none yet).
READ: Final = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder then
  return {holder, tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0}
end
return {'', tonumber(redis.call('GET', KEYS[2])) or 0}
"""
