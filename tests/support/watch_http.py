"""Reading a watch over plain HTTP: the raw JSON lines a simulator (or an API server) streams."""

from __future__ import annotations

from typing import Any

import orjson
import urllib3


def raw_lines(
    pool: urllib3.PoolManager, url: str, *, stop_after: int | None = None
) -> tuple[int, list[Any]]:
    """GET a watch URL and decode its JSON lines (bad lines come back as bytes)."""
    resp = pool.request("GET", url, preload_content=False, timeout=urllib3.Timeout(read=10))
    lines: list[Any] = []
    try:
        buffer = b""
        for chunk in resp.stream(65536):
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                try:
                    lines.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    lines.append(line)
            if stop_after is not None and len(lines) >= stop_after:
                break
    finally:
        resp.release_conn()
        resp.close()
    return resp.status, lines
