"""resourceVersions: which ones are integers, and how two of them compare.

Kubernetes calls resourceVersions opaque, but every etcd-backed apiserver issues increasing
integers (etcd revisions), and the publish script (``common.redis_layout.publish_scripts``,
the source of truth for what a shard already has) compares two versions as integers exactly
when both match Lua's ``^%d+$``: ASCII digits and nothing else. Every Python place that asks
"is this version an integer?" asks :func:`is_integer_version`, so the reflector, the
processors and ``informer-bus status`` read a version the way the shards do. ``str.isdigit``
alone is not that rule: it takes a superscript two (``"\\u00b2"``, which ``int()`` then
refuses) and fullwidth digits (``"\\uff11\\uff12"``, which ``int()`` reads as 12 and the
script does not compare at all). Pure.
"""

from __future__ import annotations

from common.object_keys import Obj

__all__ = ["compare_resource_versions", "is_integer_version", "resource_version"]


def is_integer_version(version: str) -> bool:
    """Whether ``version`` is an unsigned decimal integer in ASCII digits (leading zeros
    allowed: ``"007"`` is 7), the only versions that compare by order."""
    return version.isascii() and version.isdigit()


def resource_version(obj: Obj) -> str:
    """``metadata.resourceVersion``, or ``""`` when the object carries none."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        version = metadata.get("resourceVersion")
        if isinstance(version, str):
            return version
    return ""


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``; ``None`` when unknown.

    Used only to recognise what is already known, never to order events: versions that are not
    both integers (:func:`is_integer_version`) are equal when they are the same text and
    incomparable otherwise, exactly as the publish script does; ``"007"`` and ``"7"`` are the
    same version.
    """
    if a == b:
        return 0
    if not (is_integer_version(a) and is_integer_version(b)):
        return None
    x, y = int(a), int(b)
    return 0 if x == y else -1 if x < y else 1
