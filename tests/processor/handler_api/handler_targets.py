"""Things a ``--handler module:attr`` reference can name, good and bad, for the loading tests."""

from __future__ import annotations

from common.object_keys import DeletedFinalStateUnknown, Obj
from processor_svc.controller import Controller
from processor_svc.handlers import HandlerContext


class Recorder:
    """A handler that records every call as ``(event, payload)``."""

    def __init__(self, context: HandlerContext | None = None) -> None:
        self.context = context
        self.events: list[tuple[str, object]] = []

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self.events.append(("add", obj))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.events.append(("update", new))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self.events.append(("delete", obj))


HANDLER_OBJECT = Recorder()
"""An object with the three methods: used as is."""


def make_recorder(context: HandlerContext) -> Recorder:
    """A factory function."""
    return Recorder(context)


def failing_factory(context: HandlerContext) -> Recorder:
    raise RuntimeError("cannot reach\nthe thing it needs")


def factory_without_context() -> Recorder:
    return Recorder()


def returns_a_number(context: HandlerContext) -> object:
    return 42


NOT_A_HANDLER = 42


class DeletesNothing(Recorder):
    """Opts out of ``on_delete`` by setting it to ``None``: not a handler either."""

    on_delete = None  # type: ignore[assignment]


class HalfAsync(Recorder):
    """``async def on_update`` beside sync ``on_add`` and ``on_delete``: refused."""

    async def on_update(self, old: Obj, new: Obj) -> None:
        pass


class HalfAHandler:
    """Has on_add only: an instance is not a handler."""

    def __init__(self, context: HandlerContext) -> None:
        self.context = context

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        pass


class NoReconcile(Controller):
    """A Controller subclass that forgot reconcile: cannot be instantiated."""


class KeyRecorder(Controller):
    """The smallest real controller: records the keys it reconciles."""

    workers = 1

    def __init__(self, context: HandlerContext) -> None:
        super().__init__(context)
        self.keys: list[str] = []

    def reconcile(self, key: str) -> None:
        self.keys.append(key)
