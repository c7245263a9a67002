"""The commands the README and docs show a user to type: they must do what the text says when
copied as written (no Redis left to a default that reads someone else's 6379, no namespace
the simulator does not have)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shlex

import pytest

from apiserver_sim.fixtures import namespace_names
from apiserver_sim.settings import SimulatorSettings
from common.settings import ServiceSettings
from tests.support.paths import ROOT

DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)
_TOOLS = ("status", "subscribe", "groups")


def console_commands() -> list[tuple[str, list[str]]]:
    """Every command of a ```console block, continuation lines joined, as (document, argv)."""
    found = []
    for document in DOCUMENTS:
        for block in _CONSOLE.findall(document.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                text = line.split(" #", 1)[0].strip()
                for part in text.split("|"):
                    if part.strip():
                        found.append((document.name, _inside_the_container(shlex.split(part))))
    return found


def _inside_the_container(argv: list[str]) -> list[str]:
    """What ``docker compose exec [OPTIONS] SERVICE COMMAND...`` runs: COMMAND..."""
    if argv[:3] != ["docker", "compose", "exec"]:
        return argv
    rest = argv[3:]
    while rest and rest[0].startswith("-"):
        rest = rest[1:]
    return rest[1:]


def tool_commands() -> list[tuple[str, list[str]]]:
    return [
        (document, argv)
        for document, argv in console_commands()
        if len(argv) > 1 and argv[0].endswith("informer-bus") and argv[1] in _TOOLS
    ]


def tool_params() -> list[pytest.ParameterSet]:
    return [pytest.param(d, argv, id=f"{d}: {' '.join(argv[1:])}") for d, argv in tool_commands()]


def test_the_docs_show_the_tools() -> None:
    assert {argv[1] for _, argv in tool_commands()} == set(_TOOLS)


@pytest.mark.parametrize(("document", "argv"), tool_params())
def test_a_documented_tool_names_the_redis_it_reads(document: str, argv: list[str]) -> None:
    """Outside a container (where INFORMER_BUS_REDIS_URL is set), a tool without --redis-url
    reads whatever listens on 127.0.0.1:6379."""
    in_container = argv[0] == "informer-bus"  # `docker compose exec processor informer-bus`
    assert in_container or "--redis-url" in argv, f"{document}: {' '.join(argv)}"


@pytest.mark.parametrize(("document", "argv"), tool_params())
def test_a_documented_namespace_exists_in_the_simulator(document: str, argv: list[str]) -> None:
    namespaces = set(namespace_names(SimulatorSettings().namespaces))
    for flag, value in itertools.pairwise(argv):
        if flag == "--namespace":
            assert value in namespaces, f"{document}: the simulator has no namespace {value!r}"


def test_a_group_is_removed_with_the_groups_command() -> None:
    """``informer-bus groups delete`` removes every key of a group; a reader told to run
    ``XGROUP DESTROY`` per shard leaves the markers, leases and dead letters behind. Only the
    wire spec, which is for consumers in other languages, spells the protocol out."""
    for document in DOCUMENTS:
        if document.name != "wire.md":
            assert "XGROUP DESTROY" not in document.read_text(), document.name


def test_the_wire_example_has_the_default_shard_count() -> None:
    text = (ROOT / "docs" / "wire.md").read_text()
    default = next(f for f in dataclasses.fields(ServiceSettings) if f.name == "shard_count")
    answer = re.search(r'HGET ib:\{pods\}:layout shard_count\n"(\d+)"', text)
    assert answer, "the worked example reads the shard count"
    assert int(answer.group(1)) == default.default
    shards = {int(n) for n in re.findall(r"ib:\{pods:(\d+)\}:deltas", text)}
    assert max(shards) == default.default - 1, "the XREAD follows every shard"
