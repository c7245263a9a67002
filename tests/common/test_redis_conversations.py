"""Only ``common/redis_layout`` speaks the layout: no other module of the product registers,
loads or evaluates a Lua script, spells a hash or stream field of the layout in a Redis command,
or spells a key name or the key prefix.

Processes of different versions meet only in Redis, so a field spelled twice can drift apart
without a test noticing (issue 36). This reads the source (its syntax tree: docstrings and
comments may name keys and fields freely) of every module of the four product packages.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from common.redis_layout import (
    DEFAULT_PREFIX,
    GROUP_KEY_SUFFIXES,
    GROUP_SHARD_KEY_SUFFIXES,
    RESOURCE_KEY_SUFFIXES,
    SHARD_KEY_SUFFIXES,
    names,
)

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = ("common", "reflector_svc", "processor_svc", "informer_bus")
LAYOUT: Final = ROOT / "common" / "redis_layout"

KNOWN: Final[dict[str, str]] = {}
"""Modules that still break the rule, each with why; the test fails once one no longer does,
so that the list only shrinks."""

SCRIPT_METHODS: Final = frozenset(
    {"register_script", "evalsha", "eval", "script_load", "script_exists", "fcall"}
)
SCRIPT_COMMANDS: Final = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT", "FCALL"})
# redis-py methods that take hash or stream field names (or group and consumer names).
FIELD_METHODS: Final = frozenset(
    {
        "hget", "hmget", "hset", "hsetnx", "hdel", "hexists", "hincrby", "hstrlen",
        "xadd", "xreadgroup", "xgroup_create", "xgroup_destroy", "xgroup_setid",
        "xgroup_createconsumer", "xgroup_delconsumer", "xpending", "xpending_range", "xack",
        "xclaim", "xautoclaim", "xinfo_consumers",
    }
)  # fmt: skip
FIELD_NAMES: Final = frozenset(
    value for name, value in vars(names).items() if name.isupper() and isinstance(value, str)
)
SUFFIXES: Final = (
    SHARD_KEY_SUFFIXES + GROUP_SHARD_KEY_SUFFIXES + RESOURCE_KEY_SUFFIXES + GROUP_KEY_SUFFIXES
)
KEY_SPELLING: Final = re.compile(
    rf"(^|[^A-Za-z_]){re.escape(DEFAULT_PREFIX)}:"  # the default prefix in a key name
    r"|}:"  # a hash tag's end, as key names spell it
    rf"|:(group:|({'|'.join(map(re.escape, SUFFIXES))})$)"  # a key's last part
)


def _modules() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.is_relative_to(LAYOUT):
                yield path


def _docstrings(tree: ast.AST) -> set[int]:
    """The string statements of ``tree`` (docstrings, attribute docstrings): prose, no code."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def _constants(node: ast.AST) -> Iterator[str | bytes]:
    """The string and bytes constants in ``node`` (through lists, tuples, sets, dicts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        yield node.value
    elif isinstance(node, ast.List | ast.Tuple | ast.Set):
        for element in node.elts:
            yield from _constants(element)
    elif isinstance(node, ast.Dict):
        for part in (*node.keys, *node.values):
            if part is not None:
                yield from _constants(part)
    elif isinstance(node, ast.Starred):
        yield from _constants(node.value)


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _call_violations(node: ast.Call) -> Iterator[str]:
    """What a method call spells: a script run, or a field in a hash or stream command."""
    if not isinstance(node.func, ast.Attribute):
        return
    method, args = node.func.attr, [*node.args, *(k.value for k in node.keywords)]
    if method == "execute_command" and node.args:
        command = _text(next(_constants(node.args[0]), ""))
        if command.split(" ")[0].upper() in SCRIPT_COMMANDS:
            yield f"runs a script itself ({command})"
    if method in FIELD_METHODS:
        for value in (value for arg in args for value in _constants(arg)):
            if _text(value) in FIELD_NAMES:
                yield f"spells the field {value!r} (.{method})"


def _constant_violations(value: object) -> Iterator[str]:
    """What a constant outside docstrings spells: a field as bytes, a key name, the prefix."""
    if isinstance(value, bytes) and _text(value) in FIELD_NAMES:
        yield f"spells the field {value!r}"
    if isinstance(value, str) and KEY_SPELLING.search(value):
        yield f"spells a key name ({value!r})"
    if isinstance(value, str) and value == DEFAULT_PREFIX:
        yield f"spells the key prefix {value!r}"


def violations(path: Path) -> list[str]:
    """What ``path`` spells of the layout, one line each."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docstrings = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr in SCRIPT_METHODS:
            found.append(f"{where}: runs a script itself (.{node.attr})")
        if isinstance(node, ast.Call):
            found += (f"{where}: {what}" for what in _call_violations(node))
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            found += (f"{where}: {what}" for what in _constant_violations(node.value))
    return found


@pytest.mark.parametrize("path", list(_modules()), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_outside_the_layout_speaks_it(path: Path) -> None:
    name = str(path.relative_to(ROOT))
    found = violations(path)
    if name in KNOWN:
        assert found, f"{name} keeps to the rule now: remove it from KNOWN"
    else:
        assert found == [], f"{name} spells the Redis layout (common.redis_layout owns it)"


def test_the_check_sees_what_it_looks_for(tmp_path: Path) -> None:
    """Each kind of spelling the rule forbids is found, and the harmless look-alikes are not."""
    source = tmp_path / "sample.py"
    source.write_text(
        '"""Docstrings may say ib:{pods:0}:deltas and \'holder\'."""\n'
        "script = client.register_script(text)\n"
        "pipe.execute_command('EVALSHA', sha, 1, key)\n"
        "client.hget(key, 'holder')\n"
        "client.hmget(key, ['rv', 'fence'])\n"
        "fields[b'd']\n"
        "name = f'{prefix}:{{{resource}}}:checkpoint'\n"
        "prefix = 'ib'\n"
        "ok = {'kind': 'Pod', 'reason': 'x'}\n"
        "client.hget(key, field)\n",
        encoding="utf-8",
    )
    found = violations(source)
    lines = sorted(int(line.split(":")[0].removeprefix("line ")) for line in found)
    assert lines == [2, 3, 4, 5, 5, 6, 7, 8], found
