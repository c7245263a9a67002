"""User transforms for the reflector tests (loaded by MODULE:FUNCTION, like users' own)."""

from __future__ import annotations

from common.object_keys import Obj


def lose_the_name_of_broken_pods(obj: Obj) -> Obj:
    """Stands in for bad input: a pod labelled ``broken`` loses its metadata.name."""
    if (obj.get("metadata", {}).get("labels") or {}).get("broken") == "yes":
        obj["metadata"].pop("name", None)
    return obj
