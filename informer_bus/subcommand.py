"""The shape of one ``informer-bus NAME`` entry, kept apart from ``cli`` so that subcommand
modules can declare themselves without importing the command line (no import cycle)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Subcommand"]


@dataclass(frozen=True)
class Subcommand:
    """How to declare a subcommand's flags, and how to run it (returns the exit status)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
