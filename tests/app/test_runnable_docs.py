"""The blocks README.md, docs/handlers.md and docs/subscribe.md mark ``<!-- runnable -->`` run as
written, so the docs cannot drift from the code (issue 34): the shell blocks of a document as
one terminal session that must end with status 0 and leave nothing running (its own stop steps
stop what it started), the Python blocks each on their own. :mod:`tests.support.runnable_docs`
says what the runner changes (free ports for the documented ones, ``make install`` already
done)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.redis_server import free_port
from tests.support.runnable_docs import (
    SHELL_LANGUAGES,
    Block,
    documented_ports,
    free_ports_for,
    marks_without_block,
    run_session,
    runnable_blocks,
    with_free_ports,
)

RUN = (ROOT / "README.md", ROOT / "docs" / "handlers.md", ROOT / "docs" / "subscribe.md")
"""The documents whose runnable blocks run here."""
VENV = Path(sys.prefix)
_PREAMBLE = """\
set -eo pipefail
PS4='+ docs$ '
make() {  # the tests run inside the venv make install built
    [ "$*" = install ] || { echo "docs test: no 'make $*' here" >&2; return 1; }
}
set -x
"""


def _blocks(*languages: str) -> list[Block]:
    return [
        block
        for document in RUN
        for block in runnable_blocks(document, ROOT)
        if block.language in languages
    ]


def _environment(tmp_path: Path) -> dict[str, str]:
    """A reader's shell in a fresh checkout: ``.venv`` is the venv the tests run in (not on
    the PATH: the docs say ``.venv/bin/...``, and put it there for the kubectl ``make
    install`` may have installed into it), no INFORMER_BUS_* of the test run, no kubeconfig.
    The Redis variables point at a port nobody listens on, so a command that forgot its
    --redis-url fails here instead of reading the 127.0.0.1:6379 it would read on the
    reader's machine."""
    (tmp_path / ".venv").symlink_to(VENV)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFORMER_BUS_", "IB_"))}
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    return {
        **clean,
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
        "REDIS_URL": nowhere,
        "INFORMER_BUS_REDIS_URL": nowhere,
    }


def test_every_runnable_mark_marks_a_block() -> None:
    for document in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        assert not marks_without_block(document), (
            f"{document.name}: lines {marks_without_block(document)} mark nothing runnable "
            "(the fence must follow the mark on the next line)"
        )


def test_the_documents_have_runnable_blocks() -> None:
    """The runs below cannot pass by finding nothing to run."""
    shells = {block.document for block in _blocks(*SHELL_LANGUAGES)}
    assert shells == {"README.md", "docs/handlers.md", "docs/subscribe.md"}
    assert any("Testing your handlers" in b.text or "load_handler" in b.text
               for b in _blocks("python"))  # fmt: skip
    assert {b.language for d in RUN for b in runnable_blocks(d, ROOT)} <= {
        *SHELL_LANGUAGES, "python",
    }  # fmt: skip


def test_the_runner_swaps_every_documented_port_and_nothing_else() -> None:
    text = (
        "server --port 8001 & redis-server --port 6390 &\n"
        "for port in 8111 8112; do p --http-port $port & done\n"
        "curl http://127.0.0.1:8001/readyz; x --populate 2000 --count 8001x 18001 1714567890001-0"
    )
    assert documented_ports(text) == {8001, 6390, 8111, 8112}
    swapped = with_free_ports(text, {8001: 1, 6390: 2, 8111: 3, 8112: 4})
    assert swapped == (
        "server --port 1 & redis-server --port 2 &\n"
        "for port in 3 4; do p --http-port $port & done\n"
        "curl http://127.0.0.1:1/readyz; x --populate 2000 --count 1x 18001 1714567890001-0"
    )
    with pytest.raises(ValueError, match="808"):
        documented_ports("for n in 1 2; do p --http-port 808$n & done")


def test_the_runner_ends_what_a_session_leaves_running(tmp_path: Path) -> None:
    """Whatever a session does (exits leaving jobs behind, or hangs), nothing of it survives
    the run, and what its own steps left running is reported."""
    left = run_session("sleep 4321.1 &\nsleep 4321.2 &\nexit 3\n", cwd=tmp_path,
                       env=os.environ, timeout=20, grace=0.5)  # fmt: skip
    assert left.returncode == 3
    assert sorted(command.split(": ", 1)[1] for command in left.left_running) == [
        "sleep 4321.1", "sleep 4321.2",
    ]  # fmt: skip
    hung = run_session("sleep 4321.3 &\nsleep 4321.4\n", cwd=tmp_path, env=os.environ, timeout=1)
    assert hung.returncode is None
    assert not [p for p in Path("/proc").glob("[0-9]*") if _command(p).startswith("sleep 4321.")]


def _command(process: Path) -> str:
    try:
        return (process / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _shell_script(document: str) -> str:
    """A document's runnable shell blocks as one script, each headed by where it comes from."""
    blocks = [b for b in _blocks(*SHELL_LANGUAGES) if b.document == document]
    return "".join(f"\n# {block.where}\n{block.text}" for block in blocks)


def test_the_documents_can_run_side_by_side() -> None:
    """A reader who follows docs/handlers.md or docs/subscribe.md with the README's pipeline
    still running: no two documents use one port."""
    ports = {d.name: documented_ports(_shell_script(str(d.relative_to(ROOT)))) for d in RUN}
    assert all(ports.values())
    for first, second in itertools.combinations(ports, 2):
        shared = ports[first] & ports[second]
        assert not shared, f"{first} and {second} both use ports {sorted(shared)}"


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("document", [str(path.relative_to(ROOT)) for path in RUN])
def test_the_shell_blocks_run_as_written(document: str, tmp_path: Path) -> None:
    assert shutil.which("curl"), "curl is not installed: `make install` installs it"
    script = _shell_script(document)
    ports = free_ports_for(script)
    result = run_session(
        _PREAMBLE + with_free_ports(script, ports), cwd=tmp_path,
        env=_environment(tmp_path), timeout=110,
    )  # fmt: skip
    told = f"ports {ports}; the session's output, last lines:\n" + "\n".join(
        result.output.splitlines()[-120:]
    )
    assert result.returncode == 0, f"{document}'s blocks failed ({result.returncode}); {told}"
    assert not result.left_running, (
        f"{document}'s stop steps leave processes running: {result.left_running}; {told}"
    )
    # Each `status` and `groups list` comes after a wait for the processors' readiness.
    assert "no consumer groups" not in result.output, f"a look before the wait; {told}"
    assert "Traceback" not in result.output, told


@pytest.mark.parametrize("block", _blocks("python"), ids=lambda block: block.where)
def test_the_python_blocks_run_as_written(block: Block, tmp_path: Path) -> None:
    ports = free_ports_for(block.text)
    (tmp_path / "block.py").write_text(with_free_ports(block.text, ports))
    result = subprocess.run(
        [sys.executable, "block.py"], cwd=tmp_path, env=_environment(tmp_path),
        capture_output=True, text=True, timeout=40, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{block.where}:\n{result.stdout}{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
