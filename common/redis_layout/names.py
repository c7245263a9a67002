"""Hash fields, consumer groups and consumer names: every name a Redis value is read by.

Each name here is a contract between processes that may run different versions (a reflector
writes a checkpoint that processors, ``status`` and ``subscribe`` read), so none is spelled
anywhere else: a reader and a writer that re-spelled ``"synced_rv"`` apart could drift without
a single test noticing.
"""

from __future__ import annotations

from typing import Final

# Every name here is public: the package re-exports them all (common.redis_layout).

# --- a shard stream's entries ---
STREAM_FIELD: Final = "d"
"""The one field of every shard stream entry: its value is one wire envelope
(:mod:`common.wire`, which sends and reads it as bytes)."""

# --- a shard's checkpoint hash (written by the reflector leader only) ---
CHECKPOINT_RV: Final = "rv"
"""Every event up to this resourceVersion is on the shard's stream."""
CHECKPOINT_FENCE: Final = "fence"
"""The highest reflector leader epoch that wrote here: lower epochs are refused."""
CHECKPOINT_SYNCED_RV: Final = "synced_rv"
"""The resourceVersion of the last completed relist; never removed once written, so its
presence means "this shard holds a complete list" (``common.publication``)."""
CHECKPOINT_SYNCED_AT: Final = "synced_at"
"""When the last relist completed: milliseconds on Redis's clock (for ``status``)."""
CHECKPOINT_RELISTING: Final = "relisting"
"""``"1"`` while a relist diff is being written: the known state is not complete yet."""
CHECKPOINT_FIELDS: Final = (
    CHECKPOINT_RV,
    CHECKPOINT_FENCE,
    CHECKPOINT_SYNCED_RV,
    CHECKPOINT_RELISTING,
)
"""The fields a reflector reads back to resume (``synced_at`` is for humans only)."""

# --- every lease hash (the reflector leader lease, each shard's ownership lease) ---
LEASE_HOLDER: Final = "holder"
"""Who holds the lease (a reflector identity or a processor member id)."""
LEASE_EPOCH: Final = "epoch"
"""The fencing epoch the holder writes with."""

# --- consumer groups and consumers of the shard streams ---
PROCESSOR_GROUP: Final = "processors"
"""The default consumer group: processors started without ``--group`` read through it (the one
group there was before groups existed, so its keys keep their old names)."""
SHARD_CONSUMER: Final = "owner"
"""The consumer name of whoever owns a shard: a new owner inherits the pending entries."""
DURABLE_CONSUMER: Final = "subscriber"
"""The one consumer name a durable subscriber (``subscribe --group``) reads its group with:
stable across restarts, so a restarted subscriber finds its own pending entries."""

# --- a dead-letter entry (``ShardKeys.dead_letters``) ---
DEAD_LETTER_REASON: Final = "reason"
"""Why the entry could not be applied (one line, at most 2,000 characters)."""
DEAD_LETTER_ID: Final = "id"
"""The entry's id on the shard stream."""
DEAD_LETTER_PAYLOAD: Final = "payload"
"""The entry's raw envelope, when it had one."""

# --- a resource's layout hash (``ResourceKeys.layout``, written by the reflector leader) ---
LAYOUT_SHARD_COUNT: Final = "shard_count"
"""How many shards the reflector writes."""
LAYOUT_SHARD_KEY: Final = "shard_key"
"""What objects are sharded by (:class:`common.shard_routing.ShardKeyChoice`, e.g. ``owner``)."""
LAYOUT_KIND: Final = "kind"
"""The objects' kind (``ConfigMap``): what an owner reference to one of them names."""
LAYOUT_API_VERSION: Final = "api_version"
"""The objects' apiVersion (``v1``, ``example.com/v1``)."""
LAYOUT_NAMESPACED: Final = "namespaced"
"""``1`` when the resource is namespaced, ``0`` when cluster-scoped."""
