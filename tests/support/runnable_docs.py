"""The blocks the docs mark runnable, and running them as a reader would paste them.

A fenced block is runnable when the line before its fence is exactly :data:`RUNNABLE_MARK`
(an HTML comment: invisible once rendered). Shell blocks (``console``, ``sh``, ``bash``) of one
document are one session, in document order: a later block uses the background jobs of an
earlier one, and the last ones stop them, as in a reader's terminal. Python blocks run alone.

What a test may change in a block is only what a reader's machine changes: every port the
blocks name is swapped for a free one (parallel runs, and whatever listens on the documented
ports here), and ``make install`` is already done (the tests run in the installed venv).
The session runs in a process session of its own, so every ``&`` job it started, however it
ends, is found (``/proc``'s session id) and ended with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.support.redis_server import free_port

__all__ = [
    "RUNNABLE_MARK",
    "SHELL_LANGUAGES",
    "Block",
    "SessionResult",
    "documented_ports",
    "free_ports_for",
    "marks_without_block",
    "run_session",
    "runnable_blocks",
    "with_free_ports",
]

RUNNABLE_MARK: Final = "<!-- runnable -->"
SHELL_LANGUAGES: Final = frozenset({"console", "sh", "bash"})
_MARKED = re.compile(r"^<!-- runnable -->\n```([\w-]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_PORTS: Final = (
    re.compile(r"--(?:http-)?port[ =](\d+)"),
    re.compile(r"(?<![\w-])-p (\d+)"),
    re.compile(r"(?:127\.0\.0\.1|localhost):(\d+)"),
    re.compile(r"\bfor port in ((?:\d+[ \t]*)+)"),
)
"""Where a block names a port: a flag, an address, or the list a ``for port in`` loop walks."""
_COMPOSED_PORT = re.compile(r"(?:--(?:http-)?port[ =]|(?:127\.0\.0\.1|localhost):)\d+\$")
"""``--http-port 808$n``: a port the runner cannot swap (write the ports out, ``for port in``)."""
_STOP_GRACE: Final = 10.0


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    """The line of its opening fence (1-based), for messages."""
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def runnable_blocks(path: Path, root: Path) -> list[Block]:
    """The marked blocks of ``path``, in document order."""
    text = path.read_text()
    return [
        Block(
            document=str(path.relative_to(root)),
            line=text.count("\n", 0, match.start(1)) + 1,
            language=match.group(1),
            text=match.group(2),
        )
        for match in _MARKED.finditer(text)
    ]


def marks_without_block(path: Path) -> list[int]:
    """Lines that are the mark and that no fenced block follows (a mark the runner would
    ignore); the mark quoted inside a line of prose is not one."""
    text = path.read_text()
    marked = {text.count("\n", 0, m.start()) + 1 for m in _MARKED.finditer(text)}
    return [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() == RUNNABLE_MARK and number not in marked
    ]


def documented_ports(text: str) -> set[int]:
    """Every TCP port the text names (see :data:`_PORTS`); 0 (any port) is not one.
    ``ValueError`` for a port glued to a shell variable, which could not be swapped."""
    if composed := _COMPOSED_PORT.search(text):
        raise ValueError(f"a port built from a shell variable: {composed.group()!r}")
    found = set()
    for pattern in _PORTS:
        for match in pattern.finditer(text):
            found |= {int(port) for port in match.group(1).split() if int(port)}
    return found


def with_free_ports(text: str, ports: Mapping[int, int]) -> str:
    """``text`` with each documented port replaced wherever it stands as a number of its own."""
    for documented, free in ports.items():
        text = re.sub(rf"(?<![\w.]){documented}(?!\d)", str(free), text)
    return text


def free_ports_for(text: str) -> dict[int, int]:
    """A distinct free port for every port ``text`` names."""
    chosen: dict[int, int] = {}
    for documented in sorted(documented_ports(text)):
        port = free_port()
        while port in chosen.values():
            port = free_port()
        chosen[documented] = port
    return chosen


@dataclass(frozen=True)
class SessionResult:
    returncode: int | None
    """``None``: it did not end within the timeout (and was ended)."""
    output: str
    left_running: tuple[str, ...]
    """Command lines of the session's processes still running once the script ended by
    itself: what its own stop steps did not stop."""


def run_session(
    script: str, *, cwd: Path, env: Mapping[str, str], timeout: float, grace: float = 5.0
) -> SessionResult:
    """Run ``script`` with bash in a session of its own; end every process of the session
    before returning, whatever happened. ``grace``: how long the script's own background jobs
    may take to exit after it ended, before they count as left running."""
    log = cwd / "session.log"
    path = cwd / "session.sh"
    path.write_text(script)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", str(path)], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    session = process.pid
    left: list[str] = []
    returncode: int | None = None
    try:
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        else:
            deadline = time.monotonic() + grace
            while (left := _commands(_members(session))) and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        _end(session, process)
    return SessionResult(returncode, log.read_text(errors="replace"), tuple(left))


def _members(session: int) -> list[int]:
    """The live processes of ``session`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _ppid, _group, sid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):  # gone meanwhile
            continue
        if int(sid) == session and state != "Z":
            found.append(int(entry.name))
    return found


def _commands(pids: Iterable[int]) -> list[str]:
    commands = []
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        commands.append(f"{pid}: " + raw.replace(b"\0", b" ").decode(errors="replace").strip())
    return commands


def _end(session: int, process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to every process of the session, SIGKILL to those still there after a grace;
    reap the script."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in _members(session):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + _STOP_GRACE
        while _members(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _members(session):
            break
    if process.poll() is None:
        process.kill()
    process.wait()
    left = _members(session)
    assert not left, f"processes of the docs' session survived SIGKILL: {_commands(left)}"
