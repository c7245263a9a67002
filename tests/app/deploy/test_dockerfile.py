"""The Dockerfile, checked without a Docker engine: its instructions line by line, the files it
copies, the build context .dockerignore leaves, and its HEALTHCHECK run against a live server.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from common.observability import ObservabilityServer
from tests.app.deploy.support import (
    DOCKERFILE,
    Instruction,
    dockerfile_instructions,
    final_stage,
    image_entrypoint,
    image_environment,
    image_stage,
    uid_of_user,
)
from tests.support.paths import ROOT
from tests.support.redis_server import free_port

INSTRUCTIONS = dockerfile_instructions()
FINAL = final_stage(INSTRUCTIONS)
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def only(keyword: str, instructions: list[Instruction] = FINAL) -> Instruction:
    found = [i for i in instructions if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {len(found)}"
    return found[0]


def copy_sources() -> list[str]:
    """What ``COPY`` takes from the build context (copies from other stages left out)."""
    sources: list[str] = []
    for ins in INSTRUCTIONS:
        if ins.keyword in ("COPY", "ADD"):
            words = shlex.split(ins.arguments)
            if any(w.startswith("--from=") for w in words):
                continue
            paths = [w for w in words if not w.startswith("--")]
            sources.extend(paths[:-1])
    return sources


def test_every_stage_starts_from_a_pinned_python_3_11_slim() -> None:
    images = [shlex.split(i.arguments)[0] for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert images
    for image in images:
        assert re.fullmatch(r"python:3\.11\.[0-9]+-slim(-[a-z]+)?", image), image


def test_the_image_runs_as_a_numeric_non_root_user_before_its_entrypoint() -> None:
    user = only("USER")
    assert uid_of_user(user.arguments) != 0
    for keyword in ("ENTRYPOINT", "CMD", "HEALTHCHECK"):
        assert only(keyword).line > user.line, f"{keyword} comes before USER"


def test_the_project_is_installed_without_dev_extras() -> None:
    runs = [i.arguments for i in INSTRUCTIONS if i.keyword == "RUN"]
    built = [r for r in runs if re.search(r"\bpip (wheel|install)\b.* \.$", r)]
    assert built, "no `pip wheel .` / `pip install .` of the project"
    installed = [
        r for r in (i.arguments for i in FINAL if i.keyword == "RUN") if "pip install" in r
    ]
    name = PYPROJECT["project"]["name"]
    assert any(re.search(rf"\b{re.escape(name)}$", r) for r in installed), installed
    assert not any("[dev]" in r or "-e " in r for r in runs), "dev extras or an editable install"


def test_the_entrypoint_is_the_console_script() -> None:
    assert image_entrypoint() == ["informer-bus"]
    assert "informer-bus" in PYPROJECT["project"]["scripts"]


def test_the_simulator_has_an_image_of_its_own_and_none_in_the_products() -> None:
    """Issue 36 point 4: the API simulator is not part of the product, in its image either."""
    simulator = image_stage("apiserver-sim")
    installs = [
        i.arguments for i in simulator if i.keyword == "RUN" and "pip install" in i.arguments
    ]
    assert any(re.search(r"\bapiserver-sim$", run) for run in installs), installs
    assert image_entrypoint("apiserver-sim") == ["apiserver-sim"]
    assert uid_of_user(only("USER", simulator).arguments) != 0
    product = " ".join(i.arguments for i in FINAL)
    assert "apiserver" not in product and "apiserver" not in str(image_environment())


def test_copied_files_exist_and_hold_every_package() -> None:
    sources = copy_sources()
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such file"
    packages = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    missing = set(packages) - set(sources)
    assert not missing, f"packages the wheel needs but the image does not copy: {missing}"
    assert PYPROJECT["project"]["readme"] in sources  # the build reads it


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` (or a directory above it) is excluded (no ``!`` patterns are used)."""
    parts = Path(path).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    return any(
        fnmatch.fnmatch(candidate, pattern)
        or (pattern.startswith("**/") and fnmatch.fnmatch(Path(candidate).name, pattern[3:]))
        for pattern in patterns
        for candidate in candidates
    )


def test_dockerignore_keeps_the_context_small_but_complete() -> None:
    patterns = dockerignore_patterns()
    assert not any(p.startswith("!") for p in patterns), "ignored() does not handle exceptions"
    for unwanted in (".venv", ".git", "common/__pycache__/x.pyc", ".mypy_cache", ".pytest_cache"):
        assert ignored(unwanted, patterns), f"{unwanted} would be sent to the Docker daemon"
    for source in copy_sources():
        assert not ignored(source, patterns), f"COPY {source} but .dockerignore excludes it"
    assert ignored("common/deep/__pycache__", patterns)


@pytest.fixture
def health_server() -> Iterator[tuple[ObservabilityServer, list[bool]]]:
    """A real /healthz (the one every service serves) whose answer the test flips."""
    healthy = [True]
    server = ObservabilityServer(
        CollectorRegistry(),
        healthz=lambda: (healthy[0], "ok" if healthy[0] else "broken"),
        host="127.0.0.1",
        port=0,
    )
    server.start()
    try:
        yield server, healthy
    finally:
        server.stop()


def run_healthcheck(env_port: int | None) -> int:
    """The HEALTHCHECK command, as the container runs it, with this machine's python."""
    argv = only("HEALTHCHECK").exec_form()
    assert argv is not None and argv[0] == "python", "HEALTHCHECK must run python (no curl)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}
    env.update(image_environment())
    if env_port is not None:
        env["INFORMER_BUS_HTTP_PORT"] = str(env_port)  # the local stand-in for the fixed 8080
    result = subprocess.run(
        [sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return result.returncode


def test_the_healthcheck_probes_healthz_on_the_service_port(
    health_server: tuple[ObservabilityServer, list[bool]],
) -> None:
    server, healthy = health_server
    assert "/healthz" in only("HEALTHCHECK").arguments
    assert run_healthcheck(server.port) == 0
    healthy[0] = False
    assert run_healthcheck(server.port) != 0
    assert run_healthcheck(free_port()) != 0  # nothing listening


def test_the_image_listens_where_the_healthcheck_looks() -> None:
    env = image_environment()
    exposed = only("EXPOSE").arguments.split()
    assert exposed == [env["INFORMER_BUS_HTTP_PORT"]]
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"  # read-only root filesystem


def test_the_dockerfile_parser_joins_continuations(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text('FROM x\n# c\nRUN a \\\n    # inner\n    b\nCMD ["y"]\n')
    parsed = [(i.keyword, i.arguments, i.line) for i in dockerfile_instructions(dockerfile)]
    assert parsed == [("FROM", "x", 1), ("RUN", "a  b", 3), ("CMD", '["y"]', 6)]
    assert DOCKERFILE.is_file()
