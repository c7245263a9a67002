"""Measure candidate wire codecs for stream entries on a realistic 3.5 KB Pod.

Not a test: a script whose numbers chose the format in ``common/wire.py`` (its docstring quotes
them). Run it from the repository root::

    .venv/bin/python bench/wire_codecs.py

Compared, each as encode (from the decoded dict), encode from pre-encoded object bytes (what the
reflector has from the watch stream), and decode:

* bare codecs: ``orjson.dumps``/``loads`` and ``msgpack.packb``/``unpackb`` of the Pod alone;
* A, whole envelope as one JSON document, the object embedded (``orjson.Fragment`` when the
  object's bytes are already at hand);
* B, msgpack header array whose last element is the object's JSON bytes (msgpack ``bin``);
* C, whole envelope as msgpack.

Then the real ``common.wire`` encode/decode against the bare codec. Each figure is the best of
several repeats (the machine is shared and noisy; the minimum is the least disturbed run).
"""

from __future__ import annotations

import copy
import sys
import timeit
from collections.abc import Callable
from typing import Any

import msgpack
import orjson
from pods import sample_pod

from common.deltas import DeltaType
from common.wire import DeltaEnvelope, decode_envelope, encode_envelope

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
    bare_orjson = per_op_us(lambda: orjson.dumps(pod)) + per_op_us(lambda: orjson.loads(pod_json))
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


if __name__ == "__main__":
    main()
