"""The Redis layout: every key name, hash field, group and consumer name, Lua script and the
conversations that are the layout's own.

Processes of different versions meet only in Redis, so what they read and write there is the
protocol between them. It lives here, and only here: the reflector, the processors, retention,
``status``, ``subscribe`` and the tests take names from this package instead of spelling them.
``docs/architecture.md`` ("Redis layout") is the specification these modules implement.

* :mod:`.key_names`: key names (:class:`ShardKeys`, :class:`ResourceKeys`, and each consumer
  group's own :class:`GroupKeys` and :class:`GroupShardKeys`);
* :mod:`.names`: hash fields, consumer groups, consumer names;
* ``*_scripts`` modules: the Lua scripts, each beside the rules it enforces, as
  :class:`~.lua.LuaScript` values (the field names of :mod:`.names` formatted in at load);
* :mod:`.script_runner`: the one way a script is sent (``EVALSHA``, ``NOSCRIPT`` recovery, an
  optional ``WAIT``);
* :mod:`.snapshot`: a shard's known state with its stream position, in one ``MULTI``;
* :mod:`.checkpoint`, :mod:`.lease_reads`, :mod:`.members`: reading a checkpoint, a lease and
  a group's members from outside their scripts.

The names, scripts and reads are pure (the caller's pipeline sends the reads); only
:mod:`.script_runner` and :mod:`.snapshot` talk to Redis, and only the modules named here do.
Nothing outside this package runs a script or spells a field, key or prefix
(``tests/common/test_redis_conversations.py``).
"""

from common.redis_layout.key_names import (
    DEFAULT_PREFIX,
    GROUP_KEY_SUFFIXES,
    GROUP_NAME_SYNTAX,
    GROUP_SHARD_KEY_SUFFIXES,
    RESOURCE_KEY_SUFFIXES,
    SHARD_KEY_SUFFIXES,
    GroupKeys,
    GroupShardKeys,
    ResourceKeys,
    ShardKeys,
    check_group_name,
    parse_group_key,
    parse_resource_key,
    parse_shard_key,
    resources_key,
    scan_pattern,
)
from common.redis_layout.names import (
    CHECKPOINT_FENCE,
    CHECKPOINT_FIELDS,
    CHECKPOINT_RELISTING,
    CHECKPOINT_RV,
    CHECKPOINT_SYNCED_AT,
    CHECKPOINT_SYNCED_RV,
    DEAD_LETTER_ID,
    DEAD_LETTER_PAYLOAD,
    DEAD_LETTER_REASON,
    DURABLE_CONSUMER,
    LAYOUT_API_VERSION,
    LAYOUT_KIND,
    LAYOUT_NAMESPACED,
    LAYOUT_SHARD_COUNT,
    LAYOUT_SHARD_KEY,
    LEASE_EPOCH,
    LEASE_HOLDER,
    PROCESSOR_GROUP,
    SHARD_CONSUMER,
)

__all__ = [
    "CHECKPOINT_FENCE",
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_RELISTING",
    "CHECKPOINT_RV",
    "CHECKPOINT_SYNCED_AT",
    "CHECKPOINT_SYNCED_RV",
    "DEAD_LETTER_ID",
    "DEAD_LETTER_PAYLOAD",
    "DEAD_LETTER_REASON",
    "DEFAULT_PREFIX",
    "DURABLE_CONSUMER",
    "GROUP_KEY_SUFFIXES",
    "GROUP_NAME_SYNTAX",
    "GROUP_SHARD_KEY_SUFFIXES",
    "LAYOUT_API_VERSION",
    "LAYOUT_KIND",
    "LAYOUT_NAMESPACED",
    "LAYOUT_SHARD_COUNT",
    "LAYOUT_SHARD_KEY",
    "LEASE_EPOCH",
    "LEASE_HOLDER",
    "PROCESSOR_GROUP",
    "RESOURCE_KEY_SUFFIXES",
    "SHARD_CONSUMER",
    "SHARD_KEY_SUFFIXES",
    "GroupKeys",
    "GroupShardKeys",
    "ResourceKeys",
    "ShardKeys",
    "check_group_name",
    "parse_group_key",
    "parse_resource_key",
    "parse_shard_key",
    "resources_key",
    "scan_pattern",
]
