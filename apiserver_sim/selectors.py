"""Label and field selectors, as the simulator's LIST and WATCH take them.

The grammar and matching live in :mod:`common.selectors`, the rule the processor's views and
the reflector use too; :func:`parse_selectors` turns their parse errors into the ``400
BadRequest`` a real apiserver answers, so reflector tests see how a bad selector fails.
Matching reads the labels and field values pre-extracted on each stored revision, never the full
object.
"""

from __future__ import annotations

from apiserver_sim.resources import ResourceType
from apiserver_sim.status import bad_request
from common.selectors import FieldSelector, LabelSelector, SelectorError

__all__ = ["FieldSelector", "LabelSelector", "parse_selectors"]


def parse_selectors(
    resource: ResourceType, label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelector, FieldSelector]:
    """Both selectors of a request; ``ApiError`` 400 with the parse error's message."""
    try:
        labels = LabelSelector.parse(label_selector)
        fields = FieldSelector.parse(
            field_selector, resource.field_labels, resource=resource.qualified
        )
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    return labels, fields
