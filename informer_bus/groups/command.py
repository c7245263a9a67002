"""``informer-bus groups``: the subcommand (``list`` and ``delete``; the package docstring says
why a group is deleted).

Exit status: 0 when done; 1 when the resource or group does not exist (or, for ``list``, no
resource exists under the prefix); 2 for a mistake (bad flag or group name, unreachable
Redis) and for a deletion refused: the group has live members, or it is the default group
``processors``, and ``--force`` was not given.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Final

import orjson
import redis

from common.redis_config import redis_location
from common.redis_layout import PROCESSOR_GROUP, check_group_name
from common.resource_ids import resource_id_from
from common.service_runner import fail
from common.settings import ENV_PREFIX, SettingsError, add_flags, settings_from_args
from informer_bus.discovery import Discovered, discover
from informer_bus.groups.delete import DeleteResult, delete_group
from informer_bus.status.command import (
    SnapshotSettings,
    one_line,
    read_snapshot,
    redis_failure,
    snapshot_client,
)
from informer_bus.status.model import GroupStatus
from informer_bus.status.render import group_summary
from informer_bus.subcommand import Subcommand

__all__ = ["GROUPS", "HELP", "PROGRAM", "GroupsSettings"]

PROGRAM: Final = "informer-bus groups"

HELP = (
    "List the consumer groups of each resource (processor groups, durable subscribers), or "
    "delete one that no longer runs so that it stops holding stream entries back."
)

_DELETE_HELP = (
    "Delete consumer group NAME of RESOURCE. Retention keeps every stream entry the slowest "
    "consumer group still needs, so a group nobody runs any more keeps its streams long until "
    "the hard cap (--retention-max-entries) forces trims; deleting it lets retention trim them "
    "at its next pass. On every shard it destroys the consumer group (its position and its "
    "pending entries: they will never be processed by it) and deletes the group's shard lease, "
    "dead letters and a durable subscriber's initial-list marker; then its membership. The "
    "lease epoch counters stay: epochs must never "
    "go backwards, so that a stale owner of the old group (a paused processor waking up) is "
    "still fenced out if the group is created again. Refused while the group has live members "
    "(stop them first; --force deletes anyway, and a running member then recreates the group "
    "at its next takeover), and for the default group 'processors' unless --force."
)


@dataclass(frozen=True)
class GroupsSettings(SnapshotSettings):
    """The ``groups`` flags (``INFORMER_BUS_*`` env vars shared with the services)."""

    force: bool = field(
        default=False,
        metadata={"help": "delete: even with live members, and the default group 'processors'"},
    )


class _Missing(Exception):
    """The resource or group asked for does not exist: exit status 1."""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Exit status: 0 when done, 1 for an unknown resource or group, 2 for a mistake "
        "or a refused deletion. Every flag can also be set with the INFORMER_BUS_<NAME> "
        "environment variable shown in its help."
    )
    actions = parser.add_subparsers(dest="groups_action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="each group of each resource: kind, members, owned shards, lag, dead letters",
        description="Each consumer group of RESOURCE (default: every resource): its kind "
        "(processor or consumer), live members, owned shards, lag, synced flag and dead "
        "letters, as 'informer-bus status' shows them.",
    )
    listing.add_argument("groups_resource", nargs="?", metavar="RESOURCE", help="resource id")
    add_flags(listing, GroupsSettings, ENV_PREFIX)
    deleting = actions.add_parser(
        "delete", help="delete a group nobody runs", description=_DELETE_HELP
    )
    deleting.add_argument("groups_resource", metavar="RESOURCE", help="resource id (pods, ...)")
    deleting.add_argument("groups_name", metavar="NAME", help="the group's name")
    add_flags(deleting, GroupsSettings, ENV_PREFIX)


def _resource_id(text: str) -> str:
    try:
        return resource_id_from(text)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def _find(found: Discovered, resource: str, prefix: str, where: str) -> int:
    if resource not in found.resources:
        known = ", ".join(found.resources) or "none"
        raise _Missing(
            f"no resource {resource!r} under prefix {prefix!r} in {where} (found: {known})"
        )
    return found.resources[resource]


def _list(client: redis.Redis, settings: GroupsSettings, resource: str | None, where: str) -> int:
    found = discover(client, settings.prefix)
    wanted = dict(found.resources)
    if resource is not None:
        wanted = {resource: _find(found, resource, settings.prefix, where)}
    elif not wanted:
        raise _Missing(f"no informer-bus resources under prefix {settings.prefix!r} in {where}")
    snapshot = read_snapshot(client, settings, found, wanted)
    if settings.output == "json":
        document = {
            "redis_url": snapshot.redis_url,
            "prefix": snapshot.prefix,
            "resources": {r.resource: r.groups for r in snapshot.resources},
        }
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    for status in snapshot.resources:
        if not status.groups:
            print(f"{status.resource}: no consumer groups")
        for group in status.groups:
            print(f"{status.resource}: {group_summary(group)}")
    return 0


def _delete(
    client: redis.Redis, settings: GroupsSettings, resource: str, name: str, where: str
) -> int:
    found = discover(client, settings.prefix)
    shard_count = _find(found, resource, settings.prefix, where)
    [status] = read_snapshot(client, settings, found, {resource: shard_count}).resources
    group: GroupStatus | None = status.group(name)
    if group is None:
        known = ", ".join(g.name for g in status.groups) or "none"
        raise _Missing(f"resource {resource!r} has no group {name!r} (groups: {known})")
    if not settings.force:
        if group.live_members:
            return fail(
                PROGRAM,
                f"group {name!r} of {resource} has live members: {', '.join(group.live_members)}"
                " (stop them first, or pass --force)",
            )
        if name == PROCESSOR_GROUP:
            return fail(
                PROGRAM,
                f"{name!r} is the default processor group (what 'informer-bus processor' joins "
                "without --group); pass --force to delete it",
            )
    _report(delete_group(client, settings.prefix, resource, name, shard_count))
    return 0


def _report(result: DeleteResult) -> None:
    for shard in result.shards:
        if shard.destroyed:
            print(
                f"shard {shard.shard}: destroyed consumer group {result.group!r} "
                f"({shard.pending_dropped} pending entries dropped)"
            )
        if shard.lease_removed is not None:
            print(f"shard {shard.shard}: removed lease {shard.lease_removed}")
        if shard.dead_letters_removed:
            print(
                f"shard {shard.shard}: removed {shard.dead_letters_removed} dead letters "
                f"({shard.dead_letters_key})"
            )
    if result.members_removed:
        print(f"removed membership {result.members_key} ({result.members_removed} members)")
    kept = sum(1 for shard in result.shards if shard.epoch_kept is not None)
    print(
        f"deleted group {result.group!r} of {result.resource}: {len(result.touched)} shards "
        f"touched, {result.pending_dropped} pending entries dropped, "
        f"{result.dead_letters_removed} dead letters removed, {kept} lease epoch counters kept "
        "(epochs never go backwards)"
    )


def _run(args: argparse.Namespace) -> int:
    action: str = args.groups_action
    try:
        settings = settings_from_args(GroupsSettings, ENV_PREFIX, args)
        resource = args.groups_resource
        resource = None if resource is None else _resource_id(resource)
        name = None if action == "list" else check_group_name(args.groups_name)
        client = snapshot_client(settings)
    except (SettingsError, ValueError) as exc:
        return fail(PROGRAM, one_line(exc))
    where = redis_location(settings.redis)
    try:
        if name is None:
            return _list(client, settings, resource, where)
        assert resource is not None  # a required argument of delete
        return _delete(client, settings, resource, name, where)
    except _Missing as exc:
        print(f"{PROGRAM}: {exc}", file=sys.stderr)
        return 1
    except redis.RedisError as exc:
        return redis_failure(PROGRAM, exc, where)
    finally:
        client.close()


GROUPS = Subcommand(name="groups", help=HELP, configure=_configure, run=_run)
