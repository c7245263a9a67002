"""Process-wide runtime tuning for the long-running services.

CPython's cyclic garbage collector rescans every tracked object each time generation 0 fills
(700 allocations by default). A reflector or processor holds hundreds of thousands of decoded
objects that are acyclic and long-lived, and parsing a LIST page allocates tens of thousands
more, so with the defaults the collector ran for 36 % of the reflector's list thread (measured
with py-spy by bench/reflector.py). Freezing what exists after start-up and collecting young
garbage in larger batches keeps cycles collected while cutting that cost to a few percent.
Only the command-line entry points call this: a library must not change its host's collector.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["long_lived_heap_gc", "release_free_heap"]


@contextmanager
def long_lived_heap_gc(gen0_threshold: int = 50_000) -> Iterator[None]:
    """Tune the collector for a process that keeps a large, stable heap; restore on exit."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0_threshold, 20, 10)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None
    return trim


def release_free_heap() -> None:
    """Give the pages malloc holds free back to the system (glibc ``malloc_trim``).

    A processor's takeover reads a whole shard in one reply (megabytes of parser buffer) while
    the cache entries it keeps are allocated between those buffers; once the buffers are freed,
    glibc keeps the holes, and RSS stayed ~1 KB per cached object above what the cache holds
    (``bench/compare.py``, compact cache). Trimming after a takeover returns them. A no-op where
    malloc is not glibc's.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
