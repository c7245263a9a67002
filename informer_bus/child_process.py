"""Child processes that cannot outlive the process that started them, even a SIGKILLed one.

A parent that is killed with SIGKILL (or whose terminal closed while it ignored the hangup) runs
no cleanup at all, so its children, each in a process group of its own, go on under PID 1
forever: a Redis holding a port, processors renewing leases nobody watches. The one mechanism
that needs no cooperation from the dying parent is Linux's parent-death signal
(``prctl(PR_SET_PDEATHSIG)``): the kernel sends the child a signal of our choice the moment its
parent dies. It is set in the child between ``fork`` and ``exec`` (a ``preexec_fn``) and
survives ``exec``, so it works for any program, ``redis-server`` as much as Python children,
without changing them. A pipe the children watch would have needed every child to read it,
which ``redis-server`` does not.

Why SIGKILL is the default death signal: a parent that dies this way had no chance to run its
ordered shutdown (processors first, Redis last), so there is no order left to keep, and the
only promise still worth making is that nothing survives. SIGTERM would race every child's
graceful stop against the others' (a processor draining towards a Redis that is exiting at the
same moment) and trusts each child to honour it. Callers whose children must clean up after
themselves can pass ``death_signal=signal.SIGTERM``.

The caveats, which callers must respect:

- The signal fires when the *thread* that forked the child exits, not the process. Start
  children from a thread that lives as long as they should (the main thread, in the demo).
- The kernel clears the setting when the child ``exec``s a set-user-ID or set-group-ID program
  (or one with file capabilities): such a child is not tied to its parent.
- A parent that dies between ``fork`` and the ``prctl`` call would go unnoticed, so the child
  checks ``getppid()`` right after setting it and exits if it has already been reparented.
- ``preexec_fn`` runs Python in the forked child; CPython documents it as unsafe when other
  threads may hold locks at fork time. The function here makes two plain system calls
  (``prctl`` through a function pointer resolved before the fork, and ``getppid``) and takes
  no C library lock another thread could have held.
- Linux only. Elsewhere (no ``prctl`` in the C library) :func:`start_tied` starts the child
  untied, and :data:`TIES_CHILDREN` says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["TIES_CHILDREN", "parent_death_preexec", "start_tied"]

_PR_SET_PDEATHSIG: Final = 1


def _find_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL: Final = _find_prctl()

TIES_CHILDREN: Final = _PRCTL is not None
"""Whether children started here die with their parent (Linux)."""


def parent_death_preexec(death_signal: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``death_signal`` when the calling thread
    exits; build it in the parent just before starting the child (it remembers the parent's
    pid to detect the race described in the module docstring)."""
    prctl = _PRCTL
    if prctl is None:
        raise OSError("prctl(PR_SET_PDEATHSIG) is only available on Linux")
    parent = os.getpid()
    signum = ctypes.c_ulong(int(death_signal))
    zero = ctypes.c_ulong(0)
    option = ctypes.c_int(_PR_SET_PDEATHSIG)

    def tie_to_parent() -> None:
        if prctl(option, signum, zero, zero, zero) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the prctl: nobody will signal us
            os._exit(128 + int(death_signal))

    return tie_to_parent


def start_tied(
    args: Sequence[str],
    *,
    death_signal: signal.Signals = signal.SIGKILL,
    **popen_kwargs: Any,
) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args, **popen_kwargs)`` whose child gets ``death_signal`` when the
    calling thread (see the module docstring) or its process dies, however it dies. Only bytes
    I/O (no ``text=``), and no ``preexec_fn`` of the caller's: the tie is the one it runs."""
    if "preexec_fn" in popen_kwargs:
        raise TypeError("start_tied() sets preexec_fn itself")
    preexec = parent_death_preexec(death_signal) if TIES_CHILDREN else None
    # The thread-safety caveat of preexec_fn is the module docstring's; tie_to_parent meets it.
    return subprocess.Popen(list(args), preexec_fn=preexec, **popen_kwargs)  # noqa: PLW1509
