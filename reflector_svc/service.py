"""One reflector process: every configured resource, leader-elected, with metrics and probes.

Per resource, a :class:`~common.leader_election.LeaderElector` competes for the resource's lease;
while this replica leads, a :class:`~reflector_svc.reflector.Reflector` lists and watches and a
retention loop trims the shard streams. Replicas that do not lead stand by, ready to take over
within one lease duration. Shutdown (SIGTERM, Ctrl-C, :meth:`ReflectorService.stop`) interrupts
the watches, lets the in-flight batch finish publishing, releases the leases at once so a
standby takes over without waiting for them to expire, and joins every thread.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields

import kubernetes.client
from prometheus_client import CollectorRegistry

from common.leader_election import LeaderElector
from common.lease import RedisLease, unique_holder
from common.observability import ObservabilityServer, serve_probes
from common.publication import ResourceLayout
from common.redis_config import redis_location
from common.redis_layout import ResourceKeys, ShardKeys
from common.redis_reachability import RedisReachability
from common.replica_wait import ReplicaWait
from common.service_clients import service_clients
from reflector_svc.group_lag import summed_group_lags
from reflector_svc.lister_watcher import KubeSource
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.publish_records import FencedError
from reflector_svc.publisher import ShardPublisher
from reflector_svc.reflector import Reflector, ReflectorOptions
from reflector_svc.resources import ResolvedResource, ResourceSpec, resolve
from reflector_svc.retention import RetentionLoop, TrimResult
from reflector_svc.settings import ReflectorSettings
from reflector_svc.transform import build_transform
from reflector_svc.transport import load_api_client

__all__ = ["ReflectorService", "reflector_options"]

log = logging.getLogger(__name__)

_STOP_TIMEOUT = 10.0
"""The most a stop takes: the batch in flight and the lease releases, a few Redis calls each
bounded by its client's timeouts, and the joins."""


@dataclass
class _ResourceRunner:
    """Everything that serves one resource in this process."""

    resolved: ResolvedResource
    reflector: Reflector
    publisher: ShardPublisher
    elector: LeaderElector | None = None
    stopped: bool = False
    """Its elector was stopped: the batch in flight published, the leader lease released."""


class ReflectorService:
    """Builds and runs the reflectors of one process; :meth:`start` returns at once."""

    def __init__(
        self,
        settings: ReflectorSettings,
        *,
        api_client: kubernetes.client.ApiClient | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not settings.resource:
            raise ValueError("no resource to reflect: give at least one --resource")
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.metrics = ReflectorMetrics(self.registry)
        self._owns_api_client = api_client is None
        self.api_client = api_client or load_api_client(
            kubeconfig=settings.kube.kubeconfig,
            context=settings.kube.context,
            in_cluster=settings.kube.in_cluster,
            url=settings.kube.kube_url,
        )
        self.redis, self.lease_redis = service_clients(settings.redis, settings.lease)
        self.holder = unique_holder(settings.identity)
        self._runners: list[_ResourceRunner] = []
        self._stopping = threading.Event()
        self._leading_at_stop: list[_ResourceRunner] = []
        self._server: ObservabilityServer | None = None
        self._lag_groups: dict[str, set[str]] = {}
        """The groups whose lag this replica reports, by resource (while it leads it)."""
        self._redis_reachability = RedisReachability(
            self.lease_redis, where=redis_location(settings.redis)
        )
        try:
            for text in settings.resource:
                self._runners.append(self._build_runner(ResourceSpec.parse(text)))
        except BaseException:
            self._close_clients()
            raise

    def _build_runner(self, spec: ResourceSpec) -> _ResourceRunner:
        resolved = resolve(self.api_client, spec)
        resource_id = spec.resource_id
        layout = ResourceLayout(
            shard_count=self.settings.shard_count,
            shard_key=spec.shard_key,
            kind=resolved.kind,
            api_version=resolved.api_version,
            namespaced=resolved.namespaced,
        )
        publisher = ShardPublisher(
            self.redis,
            prefix=self.settings.prefix,
            resource=resource_id,
            shard_count=self.settings.shard_count,
            shard_key=spec.shard_key,
            replica_wait=ReplicaWait.of(self.settings.durability),
        )
        transform = build_transform(
            is_secret=resolved.kind == "Secret" and spec.group == "",
            strip_managed=self.settings.strip_managed_fields,
            allow_secret_data=self.settings.allow_secret_data,
            user_transform=self.settings.transform,
        )
        reflector = Reflector(
            resource=resource_id,
            kind=resolved.kind,
            source=KubeSource(self.api_client, resolved),
            sink=publisher,
            options=reflector_options(self.settings),
            metrics=self.metrics,
            transform=transform,
            layout=layout,
        )
        self.metrics.add_resource(resource_id)
        return _ResourceRunner(resolved=resolved, reflector=reflector, publisher=publisher)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._server = serve_probes(
            self, host=self.settings.http_host, port=self.settings.http_port
        )
        self._redis_reachability.start()
        for runner in self._runners:
            keys = ResourceKeys(self.settings.prefix, runner.reflector.resource)
            lease = RedisLease(
                self.lease_redis,
                key=keys.leader,
                epoch_key=keys.epoch,
                holder=self.holder,
                duration=self.settings.lease.lease_duration,
                replica_wait=ReplicaWait.of(self.settings.durability),
            )
            runner.elector = LeaderElector(
                lease,
                timing=self.settings.lease,
                on_started_leading=functools.partial(self._lead, runner),
                on_stopped_leading=functools.partial(self._stopped_leading, runner),
            )
            runner.elector.start()
        log.info(
            "reflector %s started for %s; metrics and probes on %s",
            self.holder,
            ", ".join(r.reflector.resource for r in self._runners),
            self._server.url,
        )

    def stop(self) -> None:
        """Stop watching, finish the batch in flight, release leases, join every thread."""
        if self._stopping.is_set():
            return
        self._leading_at_stop = [
            r for r in self._runners if r.elector is not None and r.elector.is_leader
        ]
        self._stopping.set()
        for runner in self._runners:
            runner.reflector.interrupt()
        for runner in self._runners:
            if runner.elector is not None:
                runner.elector.stop()
            runner.stopped = True
        self._redis_reachability.stop()
        started = self._server is not None  # never started (its port was taken): nothing to say
        if self._server is not None:
            self._server.stop()
        self._close_clients()
        if started:
            log.info("reflector %s stopped", self.holder)

    @property
    def stop_timeout(self) -> float:
        """The most :meth:`stop` takes (``common.service_runner`` ends the process past it)."""
        return _STOP_TIMEOUT

    def unfinished_stop(self) -> str:
        """What ending the process now would leave undone (``""``: nothing)."""
        leading = [r.reflector.resource for r in self._leading_at_stop if not r.stopped]
        if not leading:
            return ""
        return (
            f"the batch in flight and the leader lease of {', '.join(leading)} (a standby "
            f"takes over once it expires, within {self.settings.lease.lease_duration:g} s, "
            "and resumes from the checkpoints)"
        )

    def _close_clients(self) -> None:
        self.redis.close()
        self.lease_redis.close()
        if self._owns_api_client:
            self.api_client.close()

    @property
    def url(self) -> str:
        """Where /metrics, /healthz and /readyz are served (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the service is not started")
        return self._server.url

    # --- leadership -----------------------------------------------------------------------

    def _lead(self, runner: _ResourceRunner, epoch: int, stop: threading.Event) -> None:
        """Runs in the elector's worker thread for one term of leadership."""
        reflector = runner.reflector

        def interrupt_on_stop() -> None:
            stop.wait()
            reflector.interrupt()

        guard = threading.Thread(
            target=interrupt_on_stop, name=f"reflector-guard[{reflector.resource}]#{epoch}"
        )
        guard.start()
        retention = RetentionLoop(
            self.redis,
            prefix=self.settings.prefix,
            resource=reflector.resource,
            shard_count=self.settings.shard_count,
            min_entries=self.settings.retention_min_entries,
            hard_max_entries=self.settings.retention_max_entries,
            interval=self.settings.retention_interval,
            on_result=functools.partial(self._count_trim, reflector.resource),
            on_pass=functools.partial(self._report_group_lags, reflector.resource),
        )
        retention.start()
        try:
            reflector.run(epoch, stop)
        except FencedError as exc:
            log.warning("%s: fenced by a newer leader (%s); stepping down", reflector.resource, exc)
            if runner.elector is not None:
                runner.elector.step_down(epoch)
        finally:
            stop.set()
            guard.join()
            retention.stop()
            self._forget_group_lags(reflector.resource)

    def _count_trim(self, resource: str, keys: ShardKeys, result: TrimResult) -> None:
        """Retention results into metrics (the loop itself logs forced trims)."""
        if result.trimmed:
            self.metrics.trimmed.labels(resource=resource).inc(result.trimmed)
        for group in result.lost_groups:
            self.metrics.forced_trims.labels(resource=resource, group=group).inc()

    def _report_group_lags(self, resource: str, results: Sequence[TrimResult | None]) -> None:
        """A retention pass's lag per consumer group into the gauge. A pass where a shard
        failed changes nothing (a partial sum would look like a sudden catch-up); a group no
        shard has any more (deleted) loses its series."""
        if any(result is None for result in results):
            return
        lags = summed_group_lags(result.group_lags for result in results if result is not None)
        for group in self._lag_groups.get(resource, set()) - lags.keys():
            self.metrics.group_lag.remove(resource, group)
        for group, lag in lags.items():
            self.metrics.group_lag.labels(resource=resource, group=group).set(lag)
        self._lag_groups[resource] = set(lags)

    def _forget_group_lags(self, resource: str) -> None:
        """No longer leading: the next leader reports the lag, and a figure frozen here would
        be a second, stale one beside it."""
        for group in self._lag_groups.pop(resource, set()):
            self.metrics.group_lag.remove(resource, group)

    def _stopped_leading(self, runner: _ResourceRunner) -> None:
        runner.reflector.synced.clear()
        log.info("%s: no longer leading", runner.reflector.resource)

    @property
    def resources(self) -> list[str]:
        return [r.reflector.resource for r in self._runners]

    def is_synced(self, resource: str | None = None) -> bool:
        """Whether this replica leads and has synced ``resource`` (every resource if None)."""
        return all(
            r.reflector.synced.is_set()
            for r in self._runners
            if resource is None or r.reflector.resource == resource
        )

    # --- probes ---------------------------------------------------------------------------

    def healthz(self) -> tuple[bool, str]:
        if self._stopping.is_set():
            return False, "stopping"
        return True, "ok"

    def readyz(self) -> tuple[bool, str]:
        """Ready when Redis answers and every resource this replica leads is synced; a standby
        is ready."""
        unreachable = self._redis_reachability.why_unreachable
        if unreachable:
            return False, unreachable
        waiting = [
            r.reflector.resource
            for r in self._runners
            if r.elector is not None and r.elector.is_leader and not r.reflector.synced.is_set()
        ]
        if waiting:
            return False, "syncing: " + ", ".join(waiting)
        return True, "ok"


def reflector_options(settings: ReflectorSettings) -> ReflectorOptions:
    """The part of the service's settings a :class:`Reflector` is tuned by: each option is the
    setting of its name."""
    return ReflectorOptions(**{f.name: getattr(settings, f.name) for f in fields(ReflectorOptions)})
