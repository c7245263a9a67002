"""What the crash and failover tests share: a real simulator, a real Redis, real reflectors.

Reflectors run as child processes (:class:`~tests.support.bus.ReflectorProcess`, so they can be
killed with SIGKILL or paused with SIGSTOP) or in this process
(:class:`~reflector_svc.service.ReflectorService`); every one is stopped or killed by a
finalizer, even when the test fails. :class:`SimHistory` records every event the simulator
writes, so a test can check that what was published matches what really happened."""

from __future__ import annotations

from apiserver_sim import PODS, ResourceType, Simulator
from apiserver_sim.selectors import FieldSelector, LabelSelector
from tests.support.bus import (
    Bus,
    ReflectorProcess,
    as_history,
    duplicate_problems,
    history_problems,
    known_state_problems,
    order_problems,
)
from tests.support.waiting import wait_until

SHARDS = 4
LEASE = 2.0
RENEW = 1.5
RETRY = 0.2

_TYPES = {"ADDED": "Added", "MODIFIED": "Updated", "DELETED": "Deleted"}


class SimHistory:
    """Every event the simulator writes for one resource from now on, per key, in order, as
    ``(delta type, rv)`` (the simulator's watch log read through a cursor of its own).

    Call :meth:`events` before compacting the simulator's history, or the cursor falls behind.
    """

    def __init__(self, sim: Simulator, resource: ResourceType = PODS) -> None:
        self.resource = resource
        self._sub, _ = sim.state.subscribe(
            resource, None, LabelSelector.parse(None), FieldSelector.parse(None, resource),
            sim.resource_version,
        )  # fmt: skip
        self._events: dict[str, list[tuple[str, str]]] = {}

    def events(self) -> dict[str, list[tuple[str, str]]]:
        """Everything written so far."""
        while True:
            status, batch = self._sub.poll(0)
            assert status == "ok", f"the history cursor was {status}"
            if not batch:
                return self._events
            for event in batch:
                if event.resource is self.resource and not event.silent:
                    self._events.setdefault(event.key, []).append(
                        (_TYPES[event.type], str(event.rv))
                    )

    def close(self) -> None:
        self._sub.close()


def reflector_flags(redis_url: str, kube_url: str, **extra: object) -> list[str]:
    """Flags of a fast-failover reflector for pods (``page_size=100`` -> ``--page-size 100``)."""
    flags = {
        "resource": "pods", "redis_url": redis_url, "kube_url": kube_url,
        "http_host": "127.0.0.1", "http_port": 0, "shard_count": SHARDS,
        "lease_duration": LEASE, "renew_deadline": RENEW, "retry_period": RETRY,
        "checkpoint_interval": 0.2, "log_level": "info", **extra,
    }  # fmt: skip
    args: list[str] = []
    for name, value in flags.items():
        args += ["--" + name.replace("_", "-"), str(value)]
    return args


def wait_caught_up(bus: Bus, sim: Simulator, timeout: float = 30.0) -> None:
    """Until every shard is synced and the known state is the simulator's ground truth."""

    def caught_up() -> bool:
        return bus.synced() and bus.known_versions() == sim.ground_truth("pods")

    def why() -> str:
        known, truth = bus.known_versions(), sim.ground_truth("pods")
        wrong = {k for k in known.keys() | truth.keys() if known.get(k) != truth.get(k)}
        return f"the known state to match the ground truth ({len(wrong)} keys differ)"

    wait_until(caught_up, timeout, interval=0.1, what=why)


def assert_faithful(bus: Bus, sim: Simulator, history: SimHistory, *, exact: bool) -> None:
    """What the streams and the known state say agrees with what the simulator did.

    Always: known state == ground truth; no (key, type, rv) twice; per-key RVs increase; every
    published RV is one the key had; the known state is the streams' last word. ``exact``: each
    key's stream is exactly the simulator's event history (no version skipped: what a
    reflector that never relisted after its first list must publish).
    """
    by_key = bus.by_key()
    truth = sim.ground_truth("pods")
    events = history.events()
    assert bus.known_versions() == truth
    assert duplicate_problems(by_key) == []
    assert order_problems(by_key) == []
    assert known_state_problems(bus, by_key) == []
    assert history_problems(by_key, events, truth) == []
    if exact:
        published = as_history(by_key)
        differ = [k for k in published.keys() | events.keys() if published.get(k) != events.get(k)]
        assert differ == [], [(k, published.get(k), events.get(k)) for k in differ[:5]]


def holds_lease(bus: Bus, process: ReflectorProcess) -> bool:
    """Whether the child process ``process`` holds the leader lease now."""
    return process.holds(bus.holder())
