"""The peers informer-bus is compared with, each as the body of its own child process
(``python -m compare --child KIND``, started by :class:`compare.ContenderChild`).

Each says "started" once its imports are done, lists the pods its own way, says
"synced <seconds>" on stderr as a JSON log line (the way
the services write them, so :class:`harness.ServiceChild` reads both alike), then calls the
shared ``Trivial`` handler for every update until SIGTERM, which ends it at once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn, cast

import orjson
import urllib3
from bench_handlers import Trivial
from inprocess_readers import BARE_READ_SIZE, bare_list, official_list
from kubernetes import client as kube_client
from kubernetes import watch as kube_watch
from kubernetes.informer import ADDED, MODIFIED, SharedInformer

WATCH = "watch"
SHARED_INFORMER = "sharedinformer"
KOPF = "kopf"
BARE = "bare"
CONTENDERS = (BARE, WATCH, SHARED_INFORMER, KOPF)
"""The peers, by their ``--child`` / ``--skip`` name, in the order they run."""
LABELS = {
    BARE: "bare urllib3+orjson",
    WATCH: "kubernetes Watch (models)",
    SHARED_INFORMER: "kubernetes SharedInformer",
    KOPF: f"kopf {importlib.metadata.version('kopf')}",
}


def _say(message: str) -> None:
    """A JSON log line on stderr, the way the services write them (harness.ServiceChild)."""
    sys.stderr.buffer.write(orjson.dumps({"message": message}) + b"\n")
    sys.stderr.flush()


def _annotations_of(model: Any) -> dict[str, Any]:
    """What ``Trivial.on_update`` reads from a dict, taken from a kubernetes model."""
    return {"metadata": {"annotations": model.metadata.annotations}}


def _api(sim_url: str) -> kube_client.ApiClient:
    configuration = kube_client.Configuration()
    configuration.host = sim_url
    return kube_client.ApiClient(configuration)


def child_watch(sim_url: str, pods: int, handler: Trivial) -> None:
    api = _api(sim_url)
    _say(f"synced {official_list(api, pods)}")
    core = kube_client.CoreV1Api(api)
    listed = core.list_pod_for_all_namespaces(limit=1).metadata
    assert listed is not None
    # The client's watch and informer modules carry no annotations.
    stream = kube_watch.Watch().stream(  # type: ignore[no-untyped-call]
        core.list_pod_for_all_namespaces,
        resource_version=listed.resource_version,
        timeout_seconds=3600,
    )
    for event in stream:
        if event["type"] == "MODIFIED":
            handler.on_update({}, _annotations_of(event["object"]))


def child_shared_informer(sim_url: str, pods: int, handler: Trivial) -> None:
    # The client's informer module carries no annotations: an Any of it.
    informer: Any = SharedInformer(  # type: ignore[no-untyped-call]
        kube_client.CoreV1Api(_api(sim_url)).list_pod_for_all_namespaces
    )
    added = 0
    started = time.perf_counter()

    def on_added(obj: Any) -> None:
        nonlocal added
        handler.on_add(obj, True)
        added += 1
        if added == pods:
            _say(f"synced {time.perf_counter() - started}")

    informer.add_event_handler(ADDED, on_added)
    informer.add_event_handler(MODIFIED, lambda obj: handler.on_update({}, _annotations_of(obj)))
    informer.start()
    threading.Event().wait()  # until SIGTERM


def child_kopf(sim_url: str, pods: int, handler: Trivial) -> None:
    import kopf  # only this child pays for kopf's imports

    registry = kopf.OperatorRegistry()
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # no k8s Event per log line: the bench measures events
    listed = 0
    started = time.perf_counter()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=sim_url, insecure=True)

    @kopf.on.event("pods", registry=registry)
    async def seen(type: str | None, body: kopf.Body, **_: Any) -> None:
        nonlocal listed
        # Trivial only reads ``["metadata"]`` of the object: kopf's Body mapping will do.
        obj = cast(dict[str, Any], body)
        if type is None:  # kopf's mark of an object listed at start-up
            handler.on_add(obj, True)
            listed += 1
            if listed == pods:
                _say(f"synced {time.perf_counter() - started}")
        elif type == "MODIFIED":
            handler.on_update({}, obj)

    kopf.run(registry=registry, settings=settings, standalone=True, clusterwide=True)


def child_bare(sim_url: str, pods: int, handler: Trivial) -> None:
    pool = urllib3.PoolManager(maxsize=2)
    _say(f"synced {bare_list(pool, sim_url, pods)}")
    rv = orjson.loads(pool.request("GET", f"{sim_url}/api/v1/pods?limit=1").data)["metadata"][
        "resourceVersion"
    ]
    resp = pool.request(
        "GET",
        f"{sim_url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=3600",
        preload_content=False,
        timeout=urllib3.Timeout(connect=10, read=None),
    )
    buffer = b""
    loads = orjson.loads
    while chunk := resp.read1(BARE_READ_SIZE):
        lines = (buffer + chunk).split(b"\n")
        buffer = lines.pop()
        for line in lines:
            if line and (event := loads(line))["type"] == "MODIFIED":
                handler.on_update({}, event["object"])


CHILDREN: dict[str, Callable[[str, int, Trivial], None]] = {
    WATCH: child_watch,
    SHARED_INFORMER: child_shared_informer,
    KOPF: child_kopf,
    BARE: child_bare,
}


def _exit_now(signum: int, frame: FrameType | None) -> NoReturn:
    # The bench has read what it measures before it stops a child: nothing to drain, and a
    # reader blocked in a request (or kopf in its graceful stop) must not hold the run up.
    os._exit(0)


def run_child(args: argparse.Namespace) -> int:
    """One contender, in this process, until SIGTERM (started by :class:`ContenderChild`)."""
    signal.signal(signal.SIGTERM, _exit_now)
    handler = Trivial()
    _say("started")  # imports done: the bench reads this process's CPU from here
    try:
        CHILDREN[args.child](args.sim_url, args.pods, handler)
    except Exception as exc:
        _say(f"failed: {type(exc).__name__}: {exc}")
        return 1
    _say("ended")
    return 0
