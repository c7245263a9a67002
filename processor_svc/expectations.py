"""Controllers' write expectations in Redis, so that a shard's next owner honours them.

A controller's write barrier (:mod:`processor_svc.write_barrier`) keeps a key from being
reconciled on a cache older than the controller's own last write. Kept in memory only, it would
protect nothing across a takeover: the new owner's cache is built from the reflector's known
state, which may not hold the previous owner's last write yet, and its first reconcile would act
on that. So every change of a key's expectations is written to the group's hash for the key's
shard (``GroupShardKeys.expectations``), and a processor that acquires a shard loads the hash
before the shard's events are delivered.

Layout: one hash per (resource, group, shard), on the primary resource's shard tag; one field
per queue key, whose value is the key's pending expectations as JSON (``[{"resource",
"object_key", "version", "deadline"}]``, deadlines in unix seconds). Saving an empty list
deletes the field. Only ``HSET``, ``HDEL`` and ``HGETALL``, which a processor's minimal ACL
(``docs/operations.md``) grants: one command per change, one per shard loaded.

A value that cannot be read (written by a later version, or damaged) is skipped with a warning:
the worst it costs is one reconcile on a cache that may not show that write yet, which is what
happens without a store at all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
import redis

from common.redis_layout import PROCESSOR_GROUP, ResourceKeys
from processor_svc.write_barrier import Expectation

__all__ = ["RedisExpectationStore", "decode_expectations", "encode_expectations"]

log = logging.getLogger(__name__)


def encode_expectations(expectations: Sequence[Expectation]) -> bytes:
    """The JSON value of one field."""
    return orjson.dumps(
        [
            {
                "resource": e.resource,
                "object_key": e.object_key,
                "version": e.version,
                "deadline": e.deadline,
            }
            for e in expectations
        ]
    )


def decode_expectations(value: bytes | str) -> list[Expectation]:
    """The expectations one field holds; ``ValueError`` when it is not what
    :func:`encode_expectations` writes."""
    try:
        items: Any = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ValueError(f"expected a list, got {type(items).__name__}")
    expectations = []
    for item in items:
        fields = item if isinstance(item, dict) else {}
        resource, object_key = fields.get("resource"), fields.get("object_key")
        version, deadline = fields.get("version"), fields.get("deadline")
        if not (
            isinstance(resource, str)
            and isinstance(object_key, str)
            and isinstance(version, str)
            and isinstance(deadline, int | float)
            and not isinstance(deadline, bool)
        ):
            raise ValueError(f"not an expectation: {item!r}")
        expectations.append(Expectation(resource, object_key, version, float(deadline)))
    return expectations


class RedisExpectationStore:
    """:class:`~processor_svc.handlers.ExpectationStore` on Redis (module docstring).

    ``resource`` is the primary resource (its shard numbers are the store's), ``group`` the
    processor group: each group's controllers keep their own expectations.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        resource: str,
        group: str = PROCESSOR_GROUP,
    ) -> None:
        self._client = client
        self._keys = ResourceKeys(prefix, resource).group(group)

    def hash_key(self, shard: int) -> str:
        """The hash that holds ``shard``'s expectations."""
        return self._keys.shard(shard).expectations

    def save(self, shard: int, key: str, expectations: Sequence[Expectation]) -> None:
        """Record ``key``'s expectations (one ``HSET``), or forget them when there are none
        (one ``HDEL``); raises ``redis.RedisError`` when Redis cannot be written."""
        if expectations:
            self._client.hset(self.hash_key(shard), key, encode_expectations(expectations))
        else:
            self._client.hdel(self.hash_key(shard), key)

    def load(self, shard: int) -> dict[str, list[Expectation]]:
        """Every key's expectations in ``shard`` (one ``HGETALL``); unreadable values are
        skipped with a warning. Raises ``redis.RedisError`` when Redis cannot be read."""
        name = self.hash_key(shard)
        fields = self._client.hgetall(name)
        loaded: dict[str, list[Expectation]] = {}
        for field, value in fields.items():
            key = field.decode() if isinstance(field, bytes) else field
            try:
                loaded[key] = decode_expectations(value)
            except ValueError as exc:
                log.warning("skipping the unreadable expectations of %s in %s: %s", key, name, exc)
        return loaded
