"""Measure the apiserver simulator: a paginated LIST of many pods and watch throughput to one
raw reader. The simulator runs as a subprocess (its own GIL); the reader is plain urllib3 and
decodes every watch line with orjson, like a reflector would.

    .venv/bin/python bench/simulator_rates.py [--pods 100000] [--page-size 500]

Issue 3 point 10 asks for a paginated LIST of 100k pods and a live watch stream of at least
20k events/s to one reader; the lines marked ``target`` compare against those.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3

from apiserver_sim import SimulatorProcess, SimulatorSettings

LIVE_TARGET = 20_000  # events/s to one reader (issue 3, point 10)


def bench_list(
    pool: urllib3.PoolManager, url: str, page_size: int, parse: bool
) -> tuple[int, int, float]:
    """LIST all pods page by page. ``parse`` decodes each page like a client would; without
    it only the list metadata is read (what the server costs, minus the client's parsing)."""
    started = time.perf_counter()
    token = ""
    items = pages = 0
    while True:
        query = f"limit={page_size}" + (f"&continue={token}" if token else "")
        resp = pool.request("GET", f"{url}/api/v1/pods?{query}")
        assert resp.status == 200, resp.data[:200]
        if parse:
            doc = orjson.loads(resp.data)
            items += len(doc["items"])
        else:  # {"kind":..,"apiVersion":..,"metadata":{..},"items":[...]}: read the head only
            head, _, rest = resp.data.partition(b',"items":[')
            doc = orjson.loads(head + b"}")
            items += rest.count(b'{"kind":"Pod"')
        pages += 1
        token = doc["metadata"].get("continue", "")
        if not token:
            break
    return items, pages, time.perf_counter() - started


@dataclass
class WatchRun:
    events: int = 0
    chunks: int = 0
    first: float = 0.0
    last: float = 0.0
    last_rv: int = 0
    out_of_order: int = 0

    @property
    def seconds(self) -> float:
        return max(1e-9, self.last - self.first)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def read_watch(resp: urllib3.BaseHTTPResponse, want: int | None = None) -> WatchRun:
    """Decode watch lines with orjson until ``want`` events (or the server ends the stream).

    The clock starts at the first byte, so connection setup and the server's wait for the
    first event are not counted."""
    run = WatchRun()
    buffer = b""
    try:
        for chunk in resp.stream(1 << 20):
            now = time.perf_counter()
            if not run.first:
                run.first = now
            run.chunks += 1
            lines = (buffer + chunk).split(b"\n")
            buffer = lines.pop()
            for line in lines:
                event = orjson.loads(line)
                if event["type"] == "BOOKMARK":
                    continue
                rv = int(event["object"]["metadata"]["resourceVersion"])
                run.out_of_order += rv <= run.last_rv
                run.last_rv = rv
                run.events += 1
                run.last = now
            if want is not None and run.events >= want:
                break
    finally:
        resp.release_conn()
        resp.close()
    return run


def open_watch(pool: urllib3.PoolManager, url: str, rv: str, timeout: int) -> Any:
    return pool.request(
        "GET", f"{url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds={timeout}",
        preload_content=False, timeout=urllib3.Timeout(read=60),
    )  # fmt: skip


def current_rv(pool: urllib3.PoolManager, url: str) -> str:
    doc = orjson.loads(pool.request("GET", f"{url}/api/v1/pods?limit=1").data)
    rv: str = doc["metadata"]["resourceVersion"]
    return rv


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux ``/proc``; ``None`` elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_note(before: float | None, after: float | None, events: int) -> str:
    """Server CPU per event: unlike events/s, it does not move with the machine's load."""
    if before is None or after is None or not events:
        return ""
    per_event = (after - before) / events
    ceiling = f", ~{1 / per_event:,.0f}/s on a free core" if per_event > 0 else ""
    return f"; server CPU {per_event * 1e6:.0f} us/event{ceiling}"


def verdict(value: float, target: float) -> str:
    return f"target >= {target:,.0f}: {'ok' if value >= target else 'MISSED'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--replay-events", type=int, default=100_000)
    parser.add_argument("--live-rate", type=float, default=25_000)
    parser.add_argument("--live-seconds", type=float, default=3.0)
    args = parser.parse_args()

    settings = SimulatorSettings(history_max_events=max(200_000, args.replay_events * 2))
    pool = urllib3.PoolManager(maxsize=4)
    with SimulatorProcess(settings, startup_timeout=120) as sim:
        started = time.perf_counter()
        sim.populate("pods", args.pods, seed=1)
        print(f"populate {args.pods} pods: {time.perf_counter() - started:.1f} s")

        for parse in (False, True):
            items, pages, seconds = bench_list(pool, sim.url, args.page_size, parse)
            what = "decoding every page" if parse else "reading the list metadata only"
            print(f"LIST {items} pods in {pages} pages of {args.page_size}, {what}: "
                  f"{seconds:.2f} s ({pages / seconds:.0f} pages/s, "
                  f"{items / seconds:,.0f} pods/s)")  # fmt: skip

        rv = current_rv(pool, sim.url)
        started = time.perf_counter()
        stats = sim.churn(rate=0, seconds=600, seed=2, mix={"update": 1.0},
                          maxEvents=args.replay_events)  # fmt: skip
        print(f"churn {stats['events']} updates flat out: {time.perf_counter() - started:.1f} s "
              f"({stats['rate']:,.0f}/s generated in-server, no watcher)")  # fmt: skip
        run = read_watch(open_watch(pool, sim.url, rv, 120), args.replay_events)
        print(f"WATCH replay of {run.events} events to one reader: {run.seconds:.2f} s "
              f"({run.rate:,.0f} events/s)")  # fmt: skip

        # Live: the server generates churn while the reader follows, first paced at the
        # requested rate, then flat out (the ceiling of generate + stream on one GIL).
        for label, rate in ((f"paced at {args.live_rate:,.0f}/s", args.live_rate),
                            ("flat out", 0.0)):  # fmt: skip
            # The server ends the watch (timeoutSeconds) after the churn; the reader follows
            # until then, timing from the first event to the last.
            resp = open_watch(pool, sim.url, current_rv(pool, sim.url), int(args.live_seconds + 2))
            cpu_before = cpu_seconds(sim.pid)
            sim.churn(rate=rate, seconds=args.live_seconds, seed=3, wait=False,
                      mix={"update": 1.0})  # fmt: skip
            run = read_watch(resp)
            cpu_after = cpu_seconds(sim.pid)
            churned = sim.control("stop-churn")["stopped"][0]
            assert run.out_of_order == 0, "resourceVersions must increase along the stream"
            cpu = cpu_note(cpu_before, cpu_after, run.events) if rate == 0 else ""
            print(f"WATCH live, churn {label}: {run.events} events decoded in {run.seconds:.2f} s "
                  f"= {run.rate:,.0f} events/s ({verdict(run.rate, LIVE_TARGET)}; "
                  f"{churned['events']} generated at {churned['rate']:,.0f}/s"
                  f"{cpu})")  # fmt: skip
    pool.clear()


if __name__ == "__main__":
    main()
