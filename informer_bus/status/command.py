"""``informer-bus status``: the subcommand (what it reads: the package docstring).

Exit status: 0 with a report; 1 when no resource was found under the prefix (nothing to
report, a message says so); 2 for a user mistake (bad flag, unreachable Redis, a
``--resource`` that does not exist).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import redis

from common.redis_config import connection_kwargs, describe_redis_error, redis_location
from common.resource_ids import resource_id_from
from common.service_runner import fail
from common.settings import (
    ENV_PREFIX,
    BusSettings,
    MembershipTiming,
    SettingsError,
    describe_command,
    same_as,
    settings_from_args,
)
from informer_bus.discovery import Discovered, discover
from informer_bus.status.collect import collect_status, status_client
from informer_bus.status.model import StatusSnapshot
from informer_bus.status.render import render_json, render_table
from informer_bus.subcommand import Subcommand

__all__ = [
    "HELP",
    "PROGRAM",
    "STATUS",
    "SnapshotSettings",
    "StatusSettings",
    "one_line",
    "read_snapshot",
    "redis_failure",
    "snapshot_client",
]

PROGRAM: Final = "informer-bus status"

HELP = (
    "Show the pipeline's state from Redis: per resource the reflector leader, last RV and last "
    "list; per shard its checkpoint and stream; per consumer group (each processor group and "
    "durable subscriber) its members, owned shards, lag, synced flag and dead letters."
)


@dataclass(frozen=True)
class SnapshotSettings(BusSettings):
    """The flags of every tool that reads a status snapshot (``status``, ``groups``)."""

    output: str = field(
        default="table", metadata={"help": "table (for people) or json (for scripts)"}
    )
    member_ttl: float = same_as(
        MembershipTiming,
        "member_ttl",
        "the processors' --member-ttl, to turn heartbeat deadlines into heartbeat ages",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.output not in ("table", "json"):
            raise SettingsError(f"--output must be table or json, got {self.output!r}")
        if not self.member_ttl > 0:
            raise SettingsError(f"member_ttl must be > 0, got {self.member_ttl}")


@dataclass(frozen=True)
class StatusSettings(SnapshotSettings):
    """The ``status`` flags (``INFORMER_BUS_*`` env vars shared with the services)."""

    resource: tuple[str, ...] = field(
        default=(),
        metadata={"help": "resource id to show (pods, deployments.apps, or the reflector's "
                  "--resource spec); default: every resource found under the prefix; one that "
                  "only processors name shows as 'no reflector'", "metavar": "ID"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        try:  # an id, or a reflector --resource spec pasted as is: deployments.v1.apps
            ids = tuple(dict.fromkeys(resource_id_from(text) for text in self.resource))
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        object.__setattr__(self, "resource", ids)


def one_line(error: BaseException) -> str:
    """An error's message on one line (a Redis error can span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def snapshot_client(settings: BusSettings) -> redis.Redis:
    """A :func:`status_client` for the settings' Redis (``ValueError`` for a bad URL)."""
    connection = settings.redis
    return status_client(
        connection.url, cluster=connection.cluster, **connection_kwargs(connection)
    )


def read_snapshot(
    client: redis.Redis,
    settings: SnapshotSettings,
    discovered: Discovered,
    resources: Mapping[str, int],
) -> StatusSnapshot:
    """:func:`collect_status` of ``resources``, with the groups the scan found."""
    return collect_status(
        client,
        prefix=settings.prefix,
        resources=resources,
        groups=discovered.groups,
        member_ttl=settings.member_ttl,
        redis_url=settings.redis.url,
    )


def redis_failure(program: str, error: redis.RedisError, where: str) -> int:
    """Redis could not be read: one line, exit status 2."""
    return fail(
        program, f"cannot read Redis at {where}: {describe_redis_error(error) or one_line(error)}"
    )


def _configure(parser: argparse.ArgumentParser) -> None:
    describe_command(
        parser,
        HELP + " Exit status: 0 with a report, 1 when no resource exists under the prefix, 2 for "
        "a mistake (bad flag, unreachable Redis, unknown --resource).",
        StatusSettings,
        ENV_PREFIX,
    )


def _run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(StatusSettings, ENV_PREFIX, args)
        client = snapshot_client(settings)
    except (SettingsError, ValueError) as exc:
        return fail(PROGRAM, one_line(exc))
    where = redis_location(settings.redis)
    try:
        discovered = discover(client, settings.prefix)
        found = discovered.resources
        wanted = found
        if settings.resource:
            missing = [name for name in settings.resource if name not in found]
            if missing:
                known = ", ".join(found) or "none"
                return fail(
                    PROGRAM,
                    f"no resource {', '.join(map(repr, missing))} under prefix "
                    f"{settings.prefix!r} in {where} (found: {known})",
                )
            wanted = {name: found[name] for name in settings.resource}
        snapshot = read_snapshot(client, settings, discovered, wanted)
    except redis.RedisError as exc:
        return redis_failure(PROGRAM, exc, where)
    finally:
        client.close()
    if settings.output == "json":
        sys.stdout.write(render_json(snapshot) + "\n")
    elif snapshot.resources:
        sys.stdout.write(render_table(snapshot))
    if not snapshot.resources:
        print(
            f"{PROGRAM}: no informer-bus resources under prefix {settings.prefix!r} in {where} "
            "(no reflector or processor has run against it; check --redis-url and --prefix)",
            file=sys.stderr,
        )
        return 1
    return 0


STATUS = Subcommand(name="status", help=HELP, configure=_configure, run=_run)
