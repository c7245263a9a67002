"""``informer-bus status``: what the pipeline looks like right now, read from Redis alone.

Everything the services coordinate through lives in Redis (``docs/architecture.md``, "Redis
layout"), so status needs no connection to any reflector or processor and works the same for
one process or fifty: the reflector leader lease, the shard checkpoints and, for every
consumer group of a resource (each processor group and durable subscriber is one application
on the watch), its membership, its shard leases, its dead letters and its consumer group on
every shard stream.

Resources are discovered with ``SCAN`` (one pass over the keyspace, only informer-bus keys
match), and the facts are read in at most two pipelined round trips whatever the shard and
group count, so ``status`` is cheap enough for the demo's live view to call once a second.

Times come from Redis's clock (``TIME``), the same clock that stamps stream IDs, membership
deadlines and ``synced_at``: ages are then exact whatever the skew between this machine and the
services' machines.

The package holds one idea per module: :mod:`.model` (the snapshot's dataclasses),
:mod:`.collect` (reading it from Redis), :mod:`.render` (the table and JSON) and
:mod:`.command` (the subcommand). Key discovery is :mod:`informer_bus.discovery`'s.
"""
