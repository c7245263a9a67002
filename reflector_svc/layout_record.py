"""A new leader's layout, recorded before its first publish, and the relist a change forces.

Processors read how a resource is published (shard count, shard key, kind, apiVersion, scope:
``ib:{R}:layout``) from what its leader recorded. Objects published under another shard key
sit on the shards that key sent them to; only a relist, which publishes every object whose
shard is not the one that knows it, moves them where the new key sends them. So a leader whose
shard key is not the recorded one marks every shard ``relisting`` *before* it records its own
layout: should it die in between, the next leader finds its own layout recorded and still the
relist to do.
"""

from __future__ import annotations

import logging
from typing import Protocol

from common.publication import ResourceLayout
from common.shard_routing import ShardKeyChoice
from reflector_svc.publish_records import ResumePoint

__all__ = ["LayoutSink", "record_layout"]

# The reflector's lines keep the reflector's logger wherever they are written: operators
# filter its log by that name.
log = logging.getLogger("reflector_svc.reflector")


class LayoutSink(Protocol):
    """The layout's side of the reflector's view of Redis
    (:class:`~reflector_svc.reflector.DeltaSink`)."""

    def recorded_layout(self) -> ResourceLayout | None:
        """The layout the last leader recorded; ``None`` when none did; ``ValueError`` when
        it is unusable."""

    def record_layout(self, layout: ResourceLayout) -> None: ...

    def begin_relist(self, epoch: int) -> None: ...


def record_layout(
    sink: LayoutSink, epoch: int, resource: str, layout: ResourceLayout, resume: ResumePoint
) -> ResumePoint:
    """Record this leader's layout; when the objects were sharded by another shard key,
    first mark every shard relisting, so that this leader (or, should it die before, the
    next) relists and the relist moves every object to the shard its state maps to. Returns
    where to resume: ``resume``, relisting when that is now needed.

    A resource without a recorded layout was published by a reflector from before layouts,
    which sharded by key. A recorded shard count that is not ours is logged (changing it is
    an operation of its own: docs/operations.md, "Changing the shard count"), not acted on.
    """
    try:
        recorded = sink.recorded_layout()
    except ValueError as exc:
        log.warning("%s: %s; relisting", resource, exc)
        recorded, known = None, False
    else:
        known = True
    if recorded is not None and recorded.shard_count != layout.shard_count:
        log.error(
            "%s: the recorded layout has %d shards, this reflector writes %d: processors "
            "configured for %d read the wrong shards (docs/operations.md, 'Changing the "
            "shard count')",
            resource, recorded.shard_count, layout.shard_count, recorded.shard_count,
        )  # fmt: skip
    previous = recorded.shard_key if recorded is not None else ShardKeyChoice()
    published = recorded is not None or resume.resource_version is not None
    if not known or (published and previous != layout.shard_key):
        if known:
            log.warning(
                "%s: objects are sharded by %s, this leader shards by %s: relisting so "
                "that every object moves to its shard",
                resource, previous, layout.shard_key,
            )  # fmt: skip
        if not resume.needs_relist:
            sink.begin_relist(epoch)
            resume = ResumePoint(resume.resource_version, True)
    sink.record_layout(layout)
    return resume
