"""Which resources one processor serves, and how: co-sharded with its primary, or replicated.

A processor's resources come from two places: ``--resource`` / ``--replicate`` and the handler
classes that declare what they need (:class:`~processor_svc.handlers.DeclaresResources`, a
controller's ``For``/``Owns``/``Watches``). Deciding once, here, before any cache is built,
keeps one rule for both: the flags first, in their order, then the declarations; the first
co-sharded resource is the *primary* (its members and lease keys are the group's home, and a
handler that names no resource gets its events); a resource is co-sharded or replicated, never
both; and ``pods`` when nothing names a resource at all (the processor's default since its
first release).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from processor_svc.handlers import ResourceUse

__all__ = ["DEFAULT_RESOURCE", "ResourcePlan", "plan_resources"]

DEFAULT_RESOURCE = "pods"
"""What a processor serves when neither a flag nor a handler names a resource."""


@dataclass(frozen=True, slots=True)
class ResourcePlan:
    """The resources of one processor.

    ``co_sharded``: owned shard by shard, shard *N* of every one together (one lease group per
    shard number), the primary first. ``replicated``: read whole by every member (no leases).
    """

    co_sharded: tuple[str, ...]
    replicated: tuple[str, ...] = ()

    @property
    def primary(self) -> str:
        return self.co_sharded[0]

    @property
    def all(self) -> tuple[str, ...]:
        """Every served resource, co-sharded first."""
        return (*self.co_sharded, *self.replicated)

    def __str__(self) -> str:
        text = ", ".join(self.co_sharded)
        if self.replicated:
            text += f"; replicated: {', '.join(self.replicated)}"
        return text


def plan_resources(
    resources: Sequence[str],
    replicate: Sequence[str],
    declared: Iterable[tuple[str, Sequence[ResourceUse]]] = (),
) -> ResourcePlan:
    """The plan for the flags ``resources`` (co-sharded) and ``replicate``, and the ``(handler
    name, uses)`` each handler class declared. Raises ``ValueError`` (one line) when only
    replicated resources are named, or a resource is asked for both ways."""
    co_sharded = list(dict.fromkeys(resources))
    replicated = list(dict.fromkeys(replicate))
    way = dict.fromkeys(co_sharded, "--resource")
    way.update(dict.fromkeys(replicated, "--replicate"))
    for name, uses in declared:
        for use in uses:
            wanted = "--replicate" if use.replicate else "--resource"
            given = way.get(use.resource)
            if given is None:
                way[use.resource] = f"handler {name}"
                (replicated if use.replicate else co_sharded).append(use.resource)
            elif (given == "--replicate") != use.replicate and not given.startswith("handler"):
                raise ValueError(
                    f"handler {name} needs {use.resource} "
                    f"{'replicated' if use.replicate else 'co-sharded'}, but it is given with "
                    f"{given}; give it with {wanted} (or not at all)"
                )
            elif (use.resource in replicated) != use.replicate:
                raise ValueError(
                    f"handlers disagree on {use.resource}: {way[use.resource]} and {name} need "
                    "it co-sharded and replicated"
                )
    if not co_sharded and not replicated:
        co_sharded.append(DEFAULT_RESOURCE)
    if not co_sharded:
        raise ValueError(
            "no co-sharded resource to process: give --resource ID or a controller that declares "
            f"its resources (only replicated ones are given: {', '.join(replicated)})"
        )
    return ResourcePlan(tuple(co_sharded), tuple(replicated))
