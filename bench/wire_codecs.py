"""Measure candidate wire codecs for stream entries on a realistic 3.5 KB Pod.

Not a test: a script whose numbers chose the format in ``common/wire/`` (docs/performance.md,
"The wire envelope", quotes them). Run it from the repository root::

    .venv/bin/python bench/wire_codecs.py

Compared, each as encode (from the decoded dict), encode from pre-encoded object bytes (what the
reflector has from the watch stream), and decode:

* bare codecs: ``orjson.dumps``/``loads`` and ``msgpack.packb``/``unpackb`` of the Pod alone;
* A, whole envelope as one JSON document, the object embedded (``orjson.Fragment`` when the
  object's bytes are already at hand);
* B, msgpack header array whose last element is the object's JSON bytes (msgpack ``bin``);
* C, whole envelope as msgpack.

Then the real ``common.wire`` encode/decode against the bare codec.

Second table (issue 14, the routing header of wire v2): candidate layouts for a header a filtered
consumer routes on without parsing the object (key, namespace, type, rv, uid, labels, selectable
fields, ts, tombstone), each as encode from the object's JSON bytes, route (the header alone),
keep (header + object + their agreement) and bytes: a JSON header and the object after a newline;
a msgpack header (map or array) length-prefixed before the object's JSON; one msgpack array with
the object as ``bin``; two stream fields ``h`` and ``o`` (whose encode includes the one-blob form
the ``objects`` hash would need). For the two-field layout, what the second field costs Redis:
pipelined XADD and XRANGE of 1,000 entries with one field or two, and the stream's memory, on a
private redis-server started (and stopped) here.

Each figure is the best of several repeats (the machine is shared and noisy; the minimum is the
least disturbed run).
"""

from __future__ import annotations

import copy
import math
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import msgpack
import orjson
from pods import sample_pod

from common.deltas import DeltaType
from common.wire import (
    DeltaEnvelope,
    decode_envelope,
    decode_header,
    decode_object,
    encode_envelope,
)

REPEAT = 15
TARGET_SECONDS = 0.05


def per_op_us(func: Callable[[], object]) -> float:
    """Best-of-REPEAT microseconds per call, with the loop count sized to ~TARGET_SECONDS."""
    timer = timeit.Timer(func)
    number, _ = timer.autorange()
    number = max(1, int(number * TARGET_SECONDS / 0.2))
    return min(timer.repeat(repeat=REPEAT, number=number)) / number * 1e6


def _reject_ext(code: int, data: bytes) -> object:
    raise ValueError(f"msgpack ext type {code} is not allowed")


def safe_unpackb(data: bytes) -> Any:
    """msgpack decoding as a hardened consumer would configure it (as ``wire`` would have to).

    ``unpackb`` already bounds every string, bin, array and map by ``len(data)``.
    """
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        ext_hook=_reject_ext,
    )


def main() -> None:
    pod = sample_pod()
    pod_json = orjson.dumps(pod)
    pod_msgpack = msgpack.packb(pod)
    meta = pod["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    header: dict[str, Any] = {
        "v": 1,
        "t": "Updated",
        "k": key,
        "rv": meta["resourceVersion"],
        "uid": meta["uid"],
        "ts": 1714567890.123456,
        "tomb": False,
    }
    header_list = list(header.values())

    def a_encode() -> bytes:
        return orjson.dumps({**header, "o": pod})

    def a_encode_pre() -> bytes:
        return orjson.dumps({**header, "o": orjson.Fragment(pod_json)})

    a_bytes = a_encode()

    def a_decode() -> object:
        return orjson.loads(a_bytes)

    def b_encode() -> bytes:
        return msgpack.packb([*header_list, orjson.dumps(pod)])

    def b_encode_pre() -> bytes:
        return msgpack.packb([*header_list, pod_json])

    b_bytes = b_encode()

    def b_decode() -> object:
        fields = safe_unpackb(b_bytes)
        return fields, orjson.loads(fields[-1])

    def c_encode() -> bytes:
        return msgpack.packb([*header_list, pod])

    c_bytes = c_encode()

    def c_decode() -> object:
        return safe_unpackb(c_bytes)

    print(
        f"Python {sys.version.split()[0]}, orjson {orjson.__version__}, msgpack {msgpack.version}"
    )
    print(f"Pod: {len(pod_json)} bytes as JSON, {len(pod_msgpack)} bytes as msgpack\n")
    bare_loads = per_op_us(lambda: orjson.loads(pod_json))
    bare_orjson = per_op_us(lambda: orjson.dumps(pod)) + bare_loads
    bare_msgpack = per_op_us(lambda: msgpack.packb(pod)) + per_op_us(
        lambda: safe_unpackb(pod_msgpack)
    )
    rows: list[tuple[str, int, float, float | None, float]] = [
        (
            "bare orjson (Pod only)",
            len(pod_json),
            per_op_us(lambda: orjson.dumps(pod)),
            None,
            per_op_us(lambda: orjson.loads(pod_json)),
        ),
        (
            "bare msgpack (Pod only)",
            len(pod_msgpack),
            per_op_us(lambda: msgpack.packb(pod)),
            None,
            per_op_us(lambda: safe_unpackb(pod_msgpack)),
        ),
        (
            "A whole envelope orjson",
            len(a_bytes),
            per_op_us(a_encode),
            per_op_us(a_encode_pre),
            per_op_us(a_decode),
        ),
        (
            "B msgpack header + JSON bin",
            len(b_bytes),
            per_op_us(b_encode),
            per_op_us(b_encode_pre),
            per_op_us(b_decode),
        ),
        (
            "C whole envelope msgpack",
            len(c_bytes),
            per_op_us(c_encode),
            None,
            per_op_us(c_decode),
        ),
    ]
    print(f"{'option':30} {'bytes':>6} {'encode':>8} {'enc(pre)':>9} {'decode':>8} {'enc+dec':>8}")
    for name, size, enc, enc_pre, dec in rows:
        pre = f"{enc_pre:9.2f}" if enc_pre is not None else f"{'-':>9}"
        print(f"{name:30} {size:6d} {enc:8.2f} {pre} {dec:8.2f} {enc + dec:8.2f}")

    # The chosen format, through the real module (validation included).
    envelope = DeltaEnvelope(
        type=DeltaType.UPDATED,
        key=key,
        resource_version=meta["resourceVersion"],
        uid=meta["uid"],
        obj=copy.deepcopy(pod),
        observed_at=1714567890.123456,
    )
    data = encode_envelope(envelope)
    enc = per_op_us(lambda: encode_envelope(envelope))
    enc_pre = per_op_us(lambda: encode_envelope(envelope, obj_json=pod_json))
    dec = per_op_us(lambda: decode_envelope(data))
    print(f"\ncommon.wire ({len(data)} bytes): encode {enc:.2f} µs, encode from obj_json")
    print(f"  {enc_pre:.2f} µs, decode {dec:.2f} µs")
    print(f"  encode+decode {enc + dec:.2f} µs vs bare orjson dumps+loads {bare_orjson:.2f} µs")
    print(f"  = {(enc + dec) / bare_orjson:.2f}x  (reflector path, encode from obj_json: ", end="")
    print(f"{(enc_pre + dec) / bare_orjson:.2f}x); bare msgpack would be {bare_msgpack:.2f} µs")

    module_v2_report(envelope, pod, header, bare_loads)


def module_v2_report(
    envelope: DeltaEnvelope, pod: dict[str, Any], header: dict[str, Any], bare_loads: float
) -> None:
    """``common.wire``'s v2 entry points (validation included) on the Pod, beside v1's."""
    pod_json = orjson.dumps(pod)
    # The routing decode, with the header a reflector would write for a Pod.
    routed = encode_envelope(envelope, obj_json=pod_json, fields=POD_FIELDS)
    header_of = decode_header(routed)
    v1_entry = orjson.dumps(
        {**header, "o": pod}
    )  # what v1 wrote: this file's header is v1's, field for field
    enc_fields = per_op_us(lambda: encode_envelope(envelope, obj_json=pod_json, fields=POD_FIELDS))
    enc_v1 = per_op_us(lambda: orjson.dumps({**header, "o": orjson.Fragment(pod_json)}))
    route = per_op_us(lambda: decode_header(routed))
    keep = per_op_us(lambda: decode_object(routed, decode_header(routed)))
    full = per_op_us(lambda: decode_envelope(routed))
    full_v1 = per_op_us(lambda: decode_envelope(v1_entry))
    route_v1 = per_op_us(lambda: decode_header(v1_entry))
    print(f"\ncommon.wire v2 with a Pod's labels and 8 selectable fields ({len(routed)} bytes):")
    print(f"  encode from obj_json {enc_fields:.2f} µs (v1's one document: {enc_v1:.2f} µs)")
    print(f"  decode_header {route:.2f} µs, + decode_object {keep:.2f} µs, decode_envelope")
    print(f"  {full:.2f} µs (a v1 entry: {full_v1:.2f} µs; its decode_header {route_v1:.2f} µs)")
    print(f"  bare orjson.loads of the Pod {bare_loads:.2f} µs: decode_envelope is", end=" ")
    print(f"{full / bare_loads:.2f}x, routing {route / full:.0%} of a full decode")
    assert header_of.fields == POD_FIELDS


# --- issue 14: a header a filtered consumer routes on without parsing the object -----------

POD_FIELDS: dict[str, str] = {
    "spec.nodeName": "node-0042",
    "spec.restartPolicy": "Always",
    "spec.schedulerName": "default-scheduler",
    "spec.serviceAccountName": "default",
    "spec.hostNetwork": "false",
    "status.phase": "Running",
    "status.podIP": "10.83.59.107",
    "status.nominatedNodeName": "",
}
"""The selectable fields of a Pod as the reflector would hand them over (Kubernetes' own list)."""

RouteRow = tuple[str, float, float, float, int]  # name, encode, route, keep, bytes


def _routing_header(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "v": 2,
        "t": "Updated",
        "k": f"{meta['namespace']}/{meta['name']}",
        "ns": meta["namespace"],
        "rv": meta["resourceVersion"],
        "uid": meta["uid"],
        "ts": 1714567890.123456,
        "tomb": False,
        "l": meta.get("labels", {}),
        "f": POD_FIELDS,
    }


def _agrees(header: dict[str, Any], obj: Any) -> None:
    """The same check for every candidate: the object is the one its header describes."""
    meta = obj["metadata"]
    if (
        f"{meta['namespace']}/{meta['name']}" != header["k"]
        or meta["resourceVersion"] != header["rv"]
        or meta["uid"] != header["uid"]
        or meta.get("labels", {}) != header["l"]
    ):
        raise ValueError("header and object disagree")


Candidate = tuple[
    str, Callable[[], bytes], Callable[[bytes], object], Callable[[bytes], object], int | None
]
"""name, encode, route, keep, bytes when not ``len(encode())``."""


def routing_rows(pod: dict[str, Any]) -> list[RouteRow]:
    """Each candidate v2 layout as (a) encode from the object's JSON bytes, (b) route: the
    header only, (c) keep: header + object + the agreement check, (d) bytes."""
    pod_json = orjson.dumps(pod)
    header = _routing_header(pod)
    rows: list[RouteRow] = []
    candidates = [*_json_candidates(pod_json, header), *_msgpack_candidates(pod_json, header)]
    for name, encode, route, keep, size in candidates:
        data = encode()
        route(data)
        keep(data)
        rows.append(
            (
                name,
                per_op_us(encode),
                per_op_us(lambda route=route, data=data: route(data)),  # type: ignore[misc]
                per_op_us(lambda keep=keep, data=data: keep(data)),  # type: ignore[misc]
                len(data) if size is None else size,
            )
        )
    order = ["v1", "J ", "M ", "M'", "B ", "F "]
    return sorted(rows, key=lambda row: order.index(row[0][:2]))


def _json_candidates(pod_json: bytes, header: dict[str, Any]) -> list[Candidate]:
    out: list[Candidate] = []
    # v1 today: one document; routing is a full parse.
    v1_header = {"v": 1, **{k: header[k] for k in ("t", "k", "rv", "uid", "ts", "tomb")}}

    def v1_keep(data: bytes) -> object:
        doc = orjson.loads(data)
        _agrees({**doc, "l": doc["o"]["metadata"].get("labels", {})}, doc["o"])
        return doc

    out.append(
        (
            "v1 one JSON document",
            lambda: orjson.dumps({**v1_header, "o": orjson.Fragment(pod_json)}),
            orjson.loads,
            v1_keep,
            None,
        )
    )

    # J: JSON header, b"\n", the object's JSON (orjson never writes a raw newline).
    def j_route(data: bytes) -> object:
        return orjson.loads(memoryview(data)[: data.index(b"\n")])

    def j_keep(data: bytes) -> object:
        cut = data.index(b"\n")
        view = memoryview(data)
        head = orjson.loads(view[:cut])
        obj = orjson.loads(view[cut + 1 :])
        _agrees(head, obj)
        return obj

    def j_encode() -> bytes:
        return b"\n".join((orjson.dumps(header), pod_json))

    out.append(("J  JSON header \\n object", j_encode, j_route, j_keep, None))

    # F: two stream fields, h (JSON header) and o (the object's JSON). The objects hash keeps
    # one value per key, so the reflector also has to build a one-blob form of the same entry.
    head_json = orjson.dumps(header)

    def f_encode() -> bytes:
        head = orjson.dumps(header)
        return b"\n".join((head, pod_json))  # the objects hash's blob; o is pod_json itself

    def f_route(data: bytes) -> object:
        return orjson.loads(head_json)

    def f_keep(data: bytes) -> object:
        head = orjson.loads(head_json)
        obj = orjson.loads(pod_json)
        _agrees(head, obj)
        return obj

    size = len(head_json) + len(pod_json)
    out.append(("F  fields h + o (+ hash blob)", f_encode, f_route, f_keep, size))
    return out


def _msgpack_candidates(pod_json: bytes, header: dict[str, Any]) -> list[Candidate]:
    names = list(header)
    out: list[Candidate] = []

    # M: msgpack header, its length in 2 bytes in front, the object's JSON after it.
    def m_encode_map() -> bytes:
        head = msgpack.packb(header)
        return len(head).to_bytes(2, "big") + head + pod_json

    def m_encode_array() -> bytes:
        head = msgpack.packb(list(header.values()))
        return len(head).to_bytes(2, "big") + head + pod_json

    def m_route_map(data: bytes) -> object:
        return safe_unpackb(memoryview(data)[2 : 2 + int.from_bytes(data[:2], "big")])

    def m_route_array(data: bytes) -> object:
        return dict(zip(names, m_route_map(data), strict=True))  # type: ignore[call-overload]

    def m_keep(route: Callable[[bytes], Any]) -> Callable[[bytes], object]:
        def keep(data: bytes) -> object:
            head = route(data)
            obj = orjson.loads(memoryview(data)[2 + int.from_bytes(data[:2], "big") :])
            _agrees(head, obj)
            return obj

        return keep

    out.append(
        ("M  msgpack map, len-prefixed", m_encode_map, m_route_map, m_keep(m_route_map), None)
    )
    out.append(
        (
            "M' msgpack array, len-prefixed",
            m_encode_array,
            m_route_array,
            m_keep(m_route_array),
            None,
        )
    )

    # B: one msgpack array whose last element is the object's JSON as bin (copied out on
    # every unpack, routing or not).
    def b_route(data: bytes) -> object:
        return safe_unpackb(data)

    def b_keep(data: bytes) -> object:
        items = safe_unpackb(data)
        head = dict(zip(names, items, strict=False))
        obj = orjson.loads(items[-1])
        _agrees(head, obj)
        return obj

    def b_encode() -> bytes:
        return msgpack.packb([*header.values(), pod_json])

    out.append(("B  msgpack array + object bin", b_encode, b_route, b_keep, None))

    return out


def redis_field_costs(pod: dict[str, Any], entries: int = 1000) -> dict[str, float]:
    """What a second stream field costs Redis and redis-py: XADD and XRANGE of ``entries``
    entries as one field (``d``) or two (``h``, ``o``), and the stream's memory."""
    import tempfile
    from pathlib import Path

    import redis

    from tests.support.redis_server import RedisServer

    pod_json = orjson.dumps(pod)
    head = orjson.dumps(_routing_header(pod))
    one = {b"d": b"\n".join((head, pod_json))}
    two = {b"h": head, b"o": pod_json}
    layouts = {"1 field": one, "2 fields": two}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            # Interleaved, so that a noisy moment hits both layouts alike.
            for _ in range(REPEAT // 3):
                for name, fields in layouts.items():
                    client.delete(name)
                    pipe = client.pipeline(transaction=False)
                    for _ in range(entries):
                        pipe.xadd(name, fields)  # type: ignore[arg-type]
                    started = time.perf_counter()
                    pipe.execute()
                    what = f"XADD x{entries} pipelined, {name} (ms)"
                    out[what] = min(out.get(what, math.inf), (time.perf_counter() - started) * 1e3)
            for _ in range(REPEAT):
                for name in layouts:
                    started = time.perf_counter()
                    client.xrange(name)
                    what = f"XRANGE of {entries}, {name} (ms)"
                    out[what] = min(out.get(what, math.inf), (time.perf_counter() - started) * 1e3)
            for name in layouts:
                usage = client.memory_usage(name, samples=0)
                out[f"stream memory, {name} (B/entry)"] = float(usage or 0) / entries
        finally:
            client.close()
            server.stop()
    return out


def routing_main() -> None:
    pod = sample_pod()
    print("\nHeader routing (issue 14): µs per entry, encode from the object's JSON bytes")
    print(f"{'layout':32} {'encode':>7} {'route':>7} {'keep':>7} {'bytes':>6}")
    for name, enc, route, keep, size in routing_rows(pod):
        print(f"{name:32} {enc:7.2f} {route:7.2f} {keep:7.2f} {size:6d}")
    print("\nA second stream field on the Redis side (redis-py, hiredis, local redis-server):")
    for what, value in redis_field_costs(pod).items():
        print(f"  {what:36} {value:9.2f}")


if __name__ == "__main__":
    main()
    routing_main()
