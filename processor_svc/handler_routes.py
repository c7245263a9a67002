"""Which handler gets which resource's events: the ``--handler`` values and the handler objects
given in Python, routed to the resources a processor serves (:mod:`.resource_plan`).

A handler gets the events of the resource its reference names (``configmaps=mod:Audit``), else
of the first resource its class declares, else of the primary; a handler that serves several
resources (:class:`~processor_svc.handlers.ServesResources`, a controller) gets each one's.
A handler wanting a resource the processor does not serve is refused in one line naming the
flag that would serve it. The routes are the dispatchers' input: per resource, the ``(label,
handler)`` pairs and their resync periods.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.handlers import ResourceEventHandler
from processor_svc.handlers import (
    DeclaresResources,
    HandlerLoadError,
    HandlerSpec,
    ResourceUse,
    ServesResources,
    declared_resources,
    parse_handler_spec,
)
from processor_svc.resource_plan import ResourcePlan, plan_resources

__all__ = ["HandlerRoutes", "PlannedHandler", "plan_handlers"]

PlannedHandler = tuple[HandlerSpec, Sequence[ResourceUse]]
"""A ``--handler`` value and the resources its class declares (``()``: none)."""


def plan_handlers(
    handlers: Sequence[str],
    resources: Sequence[str],
    replicate: Sequence[str],
    extra_handlers: Sequence[tuple[str, ResourceEventHandler]] = (),
) -> tuple[list[PlannedHandler], ResourcePlan]:
    """The ``--handler`` values with what each class declares (their modules imported,
    nothing constructed yet), and the resources to serve for them. Raises ``ValueError`` (one
    line) without any handler, :class:`HandlerLoadError` for a name given twice or a reference
    that cannot be loaded."""
    specs = [parse_handler_spec(text) for text in handlers]
    if not specs and not extra_handlers:
        raise ValueError("no handler: give at least one --handler MODULE:ATTR")
    names = [spec.name for spec in specs] + [name for name, _ in extra_handlers]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise HandlerLoadError(f"handler {twice[0]!r} is given more than once")
    planned: list[PlannedHandler] = [(spec, declared_resources(spec.reference)) for spec in specs]
    declared = [(spec.name, uses) for spec, uses in planned]
    for name, handler in extra_handlers:
        kind: object = type(handler)
        if isinstance(kind, DeclaresResources):
            declared.append((name, tuple(kind.declared_resources())))
    return planned, plan_resources(resources, replicate, declared)


class HandlerRoutes:
    """The handlers of each resource of ``plan``, as the dispatchers take them."""

    def __init__(self, plan: ResourcePlan) -> None:
        self.plan = plan
        self.handlers: dict[str, list[tuple[str, ResourceEventHandler]]] = {
            resource: [] for resource in plan.all
        }
        """Per resource: ``(label, handler)`` in the order they were added."""
        self.resync_periods: dict[str, dict[str, float]] = {resource: {} for resource in plan.all}
        """Per resource: label -> seconds, for the handlers that resync."""

    def resource_of(self, spec: HandlerSpec, uses: Sequence[ResourceUse]) -> str:
        """The resource whose events a ``--handler`` gets (refused when not served)."""
        resource = spec.resource or (uses[0].resource if uses else self.plan.primary)
        self._check_served(spec.name, resource)
        return resource

    def add(
        self, name: str, handler: ResourceEventHandler, resource: str, period: float | None
    ) -> None:
        """Give ``handler`` the events of ``resource``, or of each resource it serves."""
        served = (
            dict(handler.resource_handlers())
            if isinstance(handler, ServesResources)
            else {resource: handler}
        )
        for target, events in served.items():
            self._check_served(name, target)
            label = name if target == resource else f"{name}[{target}]"
            self.handlers[target].append((label, events))
            if period is not None:
                self.resync_periods[target][label] = period

    def _check_served(self, name: str, resource: str) -> None:
        if resource not in self.handlers:
            raise HandlerLoadError(
                f"handler {name!r} wants the events of {resource}, which this processor does "
                f"not serve ({self.plan}): add --resource {resource} or --replicate {resource}"
            )
