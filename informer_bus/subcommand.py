"""The shape of one ``informer-bus NAME`` entry, kept apart from ``cli`` so that subcommand
modules can declare themselves without importing the command line (no import cycle)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from common.service_runner import fail
from common.settings import SettingsError, add_flags, settings_from_args

__all__ = ["Subcommand", "settings_subcommand"]

S = TypeVar("S")


@dataclass(frozen=True)
class Subcommand:
    """How to declare a subcommand's flags, and how to run it (returns the exit status)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def settings_subcommand(
    name: str,
    *,
    help: str,
    description: str,
    settings: type[S],
    env_prefix: str,
    program: str,
    run: Callable[[S], int],
) -> Subcommand:
    """A subcommand whose flags are a settings dataclass's fields (``common.settings``: flags
    and ``env_prefix`` environment variables): a bad value ends with one line and exit status
    2, good ones run ``run(settings)``."""

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.description = description
        add_flags(parser, settings, env_prefix)

    def run_with_settings(args: argparse.Namespace) -> int:
        try:
            chosen = settings_from_args(settings, env_prefix, args)
        except SettingsError as exc:
            return fail(program, str(exc))
        return run(chosen)

    return Subcommand(name=name, help=help, configure=configure, run=run_with_settings)
