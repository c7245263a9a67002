"""A Lua script of the layout as it is sent: its final text and that text's SHA1.

The text is final once its module is loaded -- the field names of :mod:`.names` are formatted
in then -- so the SHA1 is computed once and stays the same for the whole process: every call
sends it (``EVALSHA``), and the text crosses the network only when Redis lost the script
(:mod:`.script_runner`). Pure: nothing here talks to Redis.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = ["LuaScript"]


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One Lua script: its text and its SHA1."""

    script: str
    """The Lua source (named as redis-py's ``Script`` names it)."""
    sha: str = field(init=False, repr=False)
    """What ``EVALSHA`` sends."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.script.encode()).hexdigest())
