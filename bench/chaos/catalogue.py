"""The fault scenarios, as data: what ``make test`` runs (:data:`SHORT`, :data:`HA_SHORT`), what
``make chaos`` runs (:data:`FULL`) and what ``make ha`` runs (:data:`HA`, production Redis
topologies), each a fault name of :mod:`bench.chaos.faults` with its downtime, timings, sizes
and the Redis topology (:mod:`bench.chaos.topologies`). :mod:`bench.chaos.scenarios` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

REDIS_FAULTS = frozenset({"restart", "outage", "hang"})


@dataclass(frozen=True, slots=True)
class Timings:
    """Leader and shard leases, heartbeats and the reflector's longest backoff."""

    lease: float
    renew: float
    retry: float
    heartbeat: float
    member_ttl: float
    backoff_max: float


DEFAULT_TIMINGS = Timings(
    lease=15.0, renew=10.0, retry=2.0, heartbeat=1.0, member_ttl=5.0, backoff_max=30.0
)
"""The services' defaults: what a deployment runs with."""

FAST_TIMINGS = Timings(
    lease=2.0, renew=1.5, retry=0.2, heartbeat=0.1, member_ttl=0.6, backoff_max=3.0
)
"""Short leases, so a few seconds of downtime outlive every lease (a new leader and a takeover
of every shard after the fault), and a short backoff."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    fault: str
    """One of the faults :mod:`bench.chaos.scenarios` describes."""
    downtime: float
    timings: Timings = FAST_TIMINGS
    pods: int = 300
    churn_rate: float = 100.0
    warmup: float = 2.0
    """Seconds of churn before the fault."""
    aftermath: float = 1.5
    """Seconds of churn after the recovery."""
    recovery_timeout: float = 60.0
    seed: int = 7
    aof: bool = True
    """``False``: Redis without persistence, restarted empty (a documented limit)."""
    appendfsync: str = "everysec"
    """The AOF's fsync policy. With ``everysec`` a kill -9 can still lose writes Redis
    acknowledged: while a background fsync is slow (a busy disk) Redis silently postpones its
    AOF write for up to 2 s, and a processor then sees a delta again after the restart
    (docs/reliability.md). ``always`` never postpones: a kill -9 loses nothing acknowledged."""
    known_limit: bool = False
    """Broken promises are expected and documented (docs/reliability.md), not a failure."""
    reflectors: int = 1
    """How many reflector replicas run (the second one is a standby)."""
    reflector_flags: tuple[tuple[str, object], ...] = ()
    """Extra reflector settings by field name, e.g. ``(("inactivity_timeout", 1.0),)``."""
    topology: str = "single"
    """The Redis it runs on: a name in ``bench.chaos.topologies.TOPOLOGIES``."""
    wait_replicas: int = 0
    """``--redis-wait-replicas`` of every service: how many replicas confirm a publish, an
    acknowledgement or a lease change before it counts (0: asynchronous replication)."""
    rejoin: bool = False
    """``primary-kill``: start the killed primary again once a replica took over, as an
    operator replaces a dead node. On a cluster with one replica per primary the promoted one
    has no replica until then, so with ``wait_replicas`` 1 its writes wait for that."""
    slow_list: float = 0.0
    """Seconds the simulator waits before answering each request until the fault ends: a list
    of many small pages then takes seconds."""


_PAGED = (("page_size", 100), ("batch_max", 100))

SHORT = (
    # appendfsync always: the checks assume a kill -9 loses nothing Redis acknowledged, which
    # everysec does not promise on a loaded machine (a CI run lost a delivery that way).
    Scenario("redis restart (AOF always, kill -9, 2 s down)", "restart", 2.0, DEFAULT_TIMINGS,
             appendfsync="always"),
    Scenario("redis unreachable 7 s, fast leases", "outage", 7.0),
    Scenario("reflector leader SIGSTOP past its lease, then SIGCONT", "reflector-pause", 4.0,
             warmup=1.0, reflectors=2),
    Scenario("api down 2 s, silent deletions + compaction (410)", "api-compact", 2.0,
             warmup=1.0),
    Scenario("processor kill -9 x3 under churn (replaced)", "processor-kills", 1.5,
             warmup=1.0),
)  # fmt: skip
"""What ``make test`` runs (tests/pipeline/test_chaos_redis_faults.py,
test_chaos_process_and_api_faults.py)."""

FULL = (
    Scenario("redis restart (AOF, kill -9, 3 s down)", "restart", 3.0, DEFAULT_TIMINGS, 1000),
    Scenario("redis restart (AOF, kill -9, 3 s down), fast leases", "restart", 3.0, pods=1000),
    Scenario("redis unreachable 30 s", "outage", 30.0, DEFAULT_TIMINGS, 1000,
             recovery_timeout=120.0),
    Scenario("redis hung (SIGSTOP) 30 s", "hang", 30.0, DEFAULT_TIMINGS, 1000,
             recovery_timeout=120.0),
    Scenario("redis restart WITHOUT persistence (known limit)", "restart", 3.0,
             DEFAULT_TIMINGS, 1000, recovery_timeout=30.0, aof=False, known_limit=True),
    Scenario("reflector leader kill -9 during the initial list (standby)",
             "reflector-kill-list", 1.0, pods=5000, reflectors=2, reflector_flags=_PAGED,
             slow_list=0.05),
    Scenario("reflector leader kill -9 during a burst (standby)", "reflector-kill-burst", 3.0,
             pods=1000, churn_rate=400.0, reflectors=2),
    Scenario("reflector leader SIGSTOP past its lease, then SIGCONT", "reflector-pause", 5.0,
             pods=1000, reflectors=2),
    Scenario("processor kill -9 x3 under churn (replaced)", "processor-kills", 3.0, pods=1000),
    Scenario("api watches dropped every 0.5 s for 5 s", "api-drop", 5.0, pods=1000),
    Scenario("api watches stalled 5 s (watchdog 1 s)", "api-stall", 5.0, pods=1000,
             reflector_flags=(("inactivity_timeout", 1.0),)),
    Scenario("api down 3 s, silent deletions + compaction (410)", "api-compact", 3.0,
             pods=1000),
    Scenario("api 429 burst, then 500 burst", "api-errors", 30.0, pods=1000),
    Scenario("api server restart (3 s refused, state kept)", "api-restart", 3.0, pods=1000),
)  # fmt: skip
"""What ``make chaos`` runs (``python -m bench.chaos``)."""

HA = (
    # N = 0 (asynchronous replication, the default): what a failover may cost is measured and
    # reported, not a failure. N = 1: every promise must hold.
    Scenario("cluster (3+3 replicas): primary of shard 0 kill -9, N = 0", "primary-kill",
             5.0, pods=1000, topology="cluster-replicas", known_limit=True),
    Scenario("cluster (3+3 replicas): primary of shard 0 kill -9 (rejoins), N = 1",
             "primary-kill", 5.0, pods=1000, topology="cluster-replicas", wait_replicas=1,
             rejoin=True),
    Scenario("cluster (3+3 replicas): primary + reflector leader SIGSTOP 6 s, N = 0",
             "primary-pause", 6.0, pods=1000, reflectors=2, topology="cluster-replicas",
             known_limit=True),
    Scenario("cluster (3+3 replicas): primary + reflector leader SIGSTOP 6 s, N = 1",
             "primary-pause", 6.0, pods=1000, reflectors=2, topology="cluster-replicas",
             wait_replicas=1),
    Scenario("sentinel (primary + 2 replicas): primary kill -9, N = 0", "primary-kill",
             5.0, pods=1000, topology="sentinel", known_limit=True),
    Scenario("sentinel (primary + 2 replicas): primary kill -9, N = 1", "primary-kill",
             5.0, pods=1000, topology="sentinel", wait_replicas=1),
    Scenario("sentinel (primary + 2 replicas): primary + reflector leader SIGSTOP 6 s, N = 0",
             "primary-pause", 6.0, pods=1000, reflectors=2, topology="sentinel",
             known_limit=True),
    Scenario("sentinel (primary + 2 replicas): primary + reflector leader SIGSTOP 6 s, N = 1",
             "primary-pause", 6.0, pods=1000, reflectors=2, topology="sentinel",
             wait_replicas=1),
)  # fmt: skip
"""What ``make ha`` runs (``python -m bench.chaos --ha``)."""

HA_SHORT = (
    Scenario("cluster (3+3 replicas): primary kill -9 (rejoins), N = 1", "primary-kill", 3.0,
             warmup=1.0, topology="cluster-replicas", wait_replicas=1, rejoin=True),
    Scenario("sentinel (primary + 2 replicas): primary kill -9, N = 1", "primary-kill", 3.0,
             warmup=1.0, topology="sentinel", wait_replicas=1),
)  # fmt: skip
"""What ``make test`` runs of them (tests/pipeline/test_chaos_ha.py)."""
