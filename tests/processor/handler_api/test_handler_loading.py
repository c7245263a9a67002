"""``--handler module:attr[@resync]``: objects, classes, factories with a context, and errors."""

from __future__ import annotations

import pytest

from common.plugins import PluginError
from common.rate_limiters import ItemExponentialFailureRateLimiter
from common.workqueue import RateLimitingQueue
from processor_svc.handlers import (
    HandlerContext,
    HandlerLoadError,
    HandlerSpec,
    Lister,
    Startable,
    Stoppable,
    load_handler,
    load_handlers,
    make_workqueue_factory,
    parse_duration,
    parse_handler_spec,
    resync_periods,
    start_handlers,
    stop_handlers,
)
from processor_svc.lister import ShardedLister
from tests.processor.handler_api import handler_targets
from tests.support.controllers import make_context

TARGETS = "tests.processor.handler_api.handler_targets"


@pytest.fixture
def context() -> HandlerContext:
    return make_context(ShardedLister(), settings={"answer": 42}, resource="pods")


def load_error(reference: str, context: HandlerContext) -> str:
    with pytest.raises(HandlerLoadError) as info:
        load_handler(reference, context)
    message = str(info.value)
    assert "\n" not in message, "errors are one line"
    assert "Traceback" not in message
    return message


class TestLoading:
    def test_an_object_with_the_three_methods_is_used_as_is(self, context: HandlerContext) -> None:
        assert load_handler(f"{TARGETS}:HANDLER_OBJECT", context) is handler_targets.HANDLER_OBJECT

    def test_a_class_is_constructed_with_the_context(self, context: HandlerContext) -> None:
        handler = load_handler(f"{TARGETS}:Recorder", context)
        assert isinstance(handler, handler_targets.Recorder)
        assert handler.context is context

    def test_a_factory_receives_the_context(self, context: HandlerContext) -> None:
        handler = load_handler(f"{TARGETS}:make_recorder", context)
        assert isinstance(handler, handler_targets.Recorder)
        assert handler.context is context
        assert handler.context.settings == {"answer": 42}
        assert handler.context.resource == "pods"

    def test_the_context_is_frozen(self, context: HandlerContext) -> None:
        with pytest.raises(AttributeError):
            context.resource = "nodes"  # type: ignore[misc]

    def test_a_resync_suffix_is_accepted(self, context: HandlerContext) -> None:
        assert isinstance(
            load_handler(f"{TARGETS}:Recorder@30s", context), handler_targets.Recorder
        )

    def test_a_controller_class(self, context: HandlerContext) -> None:
        controller = load_handler(f"{TARGETS}:KeyRecorder", context)
        assert isinstance(controller, handler_targets.KeyRecorder)
        assert controller.lister is context.lister
        controller.stop()  # its queue runs a timer thread


class TestLoadErrors:
    def test_bad_reference(self, context: HandlerContext) -> None:
        assert "MODULE:ATTRIBUTE" in load_error("no_colon_here", context)

    def test_missing_module(self, context: HandlerContext) -> None:
        assert "cannot import" in load_error("no_such_module_xyz:thing", context)

    def test_missing_attribute(self, context: HandlerContext) -> None:
        assert "no attribute" in load_error(f"{TARGETS}:nothing_here", context)

    def test_neither_handler_nor_factory(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:NOT_A_HANDLER", context)
        assert f"{TARGETS}:NOT_A_HANDLER" in message
        assert "is a int" in message
        assert "on_add/on_update/on_delete" in message

    def test_a_factory_that_raises_is_named(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:failing_factory", context)
        assert message == (
            f"handler factory '{TARGETS}:failing_factory' failed: "
            "RuntimeError: cannot reach the thing it needs"
        )

    def test_a_factory_that_takes_no_context(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:factory_without_context", context)
        assert "must take one argument (the HandlerContext)" in message

    def test_a_factory_that_returns_no_handler(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:returns_a_number", context)
        assert "returned a int without on_add, on_update, on_delete" in message

    def test_a_class_whose_instances_lack_methods(self, context: HandlerContext) -> None:
        assert "without on_update, on_delete" in load_error(f"{TARGETS}:HalfAHandler", context)

    def test_a_handler_mixing_async_and_sync_methods(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:HalfAsync", context)
        assert message.startswith(f"handler '{TARGETS}:HalfAsync': handler ")
        assert "mixes async (on_update) and sync (on_add, on_delete)" in message

    def test_a_method_set_to_none_is_missing(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:DeletesNothing", context)
        assert message == (
            f"handler factory '{TARGETS}:DeletesNothing' returned a DeletesNothing without "
            "on_delete"
        )

    def test_an_abstract_controller(self, context: HandlerContext) -> None:
        message = load_error(f"{TARGETS}:NoReconcile", context)
        assert "NoReconcile" in message and "reconcile" in message

    def test_the_error_is_a_plugin_error(self, context: HandlerContext) -> None:
        with pytest.raises(PluginError):
            load_handler(f"{TARGETS}:NOT_A_HANDLER", context)


class TestResyncSyntax:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("30s", 30.0),
            ("1m30s", 90.0),
            ("500ms", 0.5),
            ("2h", 7200.0),
            ("1.5m", 90.0),
            ("45", 45.0),
            ("0", 0.0),
        ],
    )
    def test_durations(self, text: str, seconds: float) -> None:
        assert parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize("text", ["", "s", "30x", "30s5", "-5", "inf", "nan", "1 m"])
    def test_bad_durations(self, text: str) -> None:
        with pytest.raises(ValueError, match="duration"):
            parse_duration(text)

    def test_specs(self) -> None:
        assert parse_handler_spec("m:a") == HandlerSpec("m:a", None)
        assert parse_handler_spec("m:a@30s") == HandlerSpec("m:a", 30.0)
        assert parse_handler_spec(" m:a@1m ").resync_period == 60.0
        assert parse_handler_spec("m:a@0") == HandlerSpec("m:a", None)
        assert parse_handler_spec("m:a@5m").name == "m:a"

    def test_below_the_minimum_is_refused(self) -> None:
        with pytest.raises(HandlerLoadError, match="below the minimum of 1s"):
            parse_handler_spec("m:a@500ms")

    def test_bad_period_names_the_handler(self) -> None:
        with pytest.raises(HandlerLoadError, match="'m:a@soon'"):
            parse_handler_spec("m:a@soon")

    def test_load_handlers_and_resync_periods(self, context: HandlerContext) -> None:
        loaded = load_handlers(
            [f"{TARGETS}:HANDLER_OBJECT@30s", f"{TARGETS}:make_recorder", f"{TARGETS}:Recorder@2m"],
            context,
        )
        assert [h.name for h in loaded] == [
            f"{TARGETS}:HANDLER_OBJECT",
            f"{TARGETS}:make_recorder",
            f"{TARGETS}:Recorder",
        ]
        assert loaded[0].handler is handler_targets.HANDLER_OBJECT
        assert resync_periods(loaded) == {
            f"{TARGETS}:HANDLER_OBJECT": 30.0,
            f"{TARGETS}:Recorder": 120.0,
        }

    def test_a_handler_named_twice_is_refused(self, context: HandlerContext) -> None:
        with pytest.raises(HandlerLoadError, match="more than once"):
            load_handlers([f"{TARGETS}:Recorder", f"{TARGETS}:Recorder@10s"], context)


def test_handlers_get_a_lister_that_cannot_change_what_it_shows() -> None:
    exposed = {name for name in vars(Lister) if not name.startswith("_")}
    assert not exposed & {"attach", "detach", "mark_synced", "new_store"}
    assert exposed <= set(dir(ShardedLister))  # the processor's lister is one
    assert HandlerContext.__annotations__["lister"] == "Lister"


class TestLifecycleAndQueues:
    def test_start_and_stop_handlers(self, context: HandlerContext) -> None:
        calls: list[str] = []

        class Managed(handler_targets.Recorder):
            def __init__(self, label: str) -> None:
                super().__init__()
                self.label = label

            def start(self) -> None:
                calls.append(f"start {self.label}")

            def stop(self, timeout: float | None = None) -> bool:
                calls.append(f"stop {self.label} {timeout is not None}")
                return self.label != "b"

        handlers = [Managed("a"), handler_targets.Recorder(), Managed("b")]
        start_handlers(handlers)
        assert not stop_handlers(handlers, timeout=1.0)  # b did not stop in time
        assert calls == ["start a", "start b", "stop b True", "stop a True"]
        assert stop_handlers([handlers[0]])

    def test_only_handlers_with_a_start_or_stop_method_are_called(self) -> None:
        # The lifecycle shapes are protocols: a method set to None does not count as one.
        calls: list[str] = []

        class StartsOnly(handler_targets.Recorder):
            stop = None

            def start(self) -> None:
                calls.append("start")

        class StopsOnly(handler_targets.Recorder):
            def stop(self, timeout: float | None = None) -> None:
                calls.append("stop")  # returning None is not "did not stop in time"

        handlers = [StartsOnly(), StopsOnly(), handler_targets.Recorder()]
        assert [isinstance(h, Startable) for h in handlers] == [True, False, False]
        assert [isinstance(h, Stoppable) for h in handlers] == [False, True, False]
        start_handlers(handlers)
        assert stop_handlers(handlers, timeout=1.0)
        assert calls == ["start", "stop"]

    def test_workqueue_factory(self) -> None:
        limiter = ItemExponentialFailureRateLimiter[str](0.001, 0.01)
        factory = make_workqueue_factory(rate_limiter_factory=lambda: limiter)
        queue = factory("my-queue")
        try:
            assert isinstance(queue, RateLimitingQueue)
            assert queue.name == "my-queue"
            queue.add_rate_limited("k")
            assert limiter.num_requeues("k") == 1
        finally:
            queue.shut_down()
