"""The ``informer-bus`` command.

Subcommands register themselves in :data:`SUBCOMMANDS`; each capability (reflector, processor,
demo, subscribe, status, groups) adds one. The API simulator is a program of its own
(``apiserver-sim``, package ``apiserver_sim``), not part of the product. A user mistake on the
command line ends with a one-line message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from informer_bus import __version__
from informer_bus.demo.command import DEMO
from informer_bus.groups.command import GROUPS
from informer_bus.status.command import STATUS
from informer_bus.subcommand import Subcommand
from informer_bus.subscribe_command import SUBSCRIBE
from processor_svc import cli as processor_cli
from reflector_svc import cli as reflector_cli

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

DESCRIPTION = """\
Kubernetes informers as a multiprocess event pipeline on Redis Streams.

A reflector lists and watches the Kubernetes API and publishes deltas onto sharded Redis
streams; processors consume them into per-shard indexed stores and call your handlers.
Every flag can also be set with an INFORMER_BUS_* environment variable.
"""


class _ServiceCli(Protocol):
    """What a service's ``cli`` module declares."""

    HELP: str

    def configure_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _service(name: str, module: _ServiceCli) -> Subcommand:
    """A service's subcommand, declared by its ``cli`` module (which cannot import this layer)."""
    return Subcommand(
        name=name, help=module.HELP, configure=module.configure_parser, run=module.run
    )


# Each capability appends its entry here (explicit imports: the CLI is the top layer).
SUBCOMMANDS: list[Subcommand] = []
SUBCOMMANDS.append(_service("reflector", reflector_cli))
SUBCOMMANDS.append(_service("processor", processor_cli))
SUBCOMMANDS.append(SUBSCRIBE)
SUBCOMMANDS.append(DEMO)
SUBCOMMANDS.append(STATUS)
SUBCOMMANDS.append(GROUPS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="informer-bus",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"informer-bus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for sub in SUBCOMMANDS:
        sub_parser = commands.add_parser(sub.name, help=sub.help, description=sub.help)
        sub.configure(sub_parser)
        sub_parser.set_defaults(run=sub.run, subcommand_parser=sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # argparse hands a subcommand's unknown arguments up to the top-level parser, whose usage
    # says nothing about the subcommand's flags: report them with the subcommand's own usage.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        owner: argparse.ArgumentParser = getattr(args, "subcommand_parser", parser)
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0 if argv is None and len(sys.argv) <= 1 else 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
