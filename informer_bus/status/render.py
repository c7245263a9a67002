"""The status snapshot for people (one table block per resource) and for scripts (JSON)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

import orjson

from common.sharding import shard_ranges as ranges
from informer_bus.status.model import GroupStatus, ResourceStatus, StatusSnapshot

__all__ = ["group_summary", "render_json", "render_resource", "render_table", "shard_ranges"]


def render_json(snapshot: StatusSnapshot) -> str:
    """The snapshot as indented JSON (field names as in the dataclasses), for scripts."""
    return orjson.dumps(snapshot, option=orjson.OPT_INDENT_2).decode()


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _when(unix: float | None, age: float | None) -> str:
    if unix is None:
        return "never"
    stamp = datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{stamp} ({_seconds(age)} ago)"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _columns(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str = "  ") -> list[str]:
    table = [list(header), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return [
        (indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        .rstrip()
        for row in table
    ]  # fmt: skip


def shard_ranges(shards: Sequence[int]) -> str:
    """``0-3,7,9-10`` (``-`` for none): short enough for a table cell."""
    return ranges(shards) or "-"


def _never_published(resource: ResourceStatus) -> str:
    """Why no reflector counts: none ever came, or the first list was cut short (its deltas
    are on the streams, the shards stay marked relisting, and no reflector leads)."""
    if not any(shard.relisting for shard in resource.shards):
        return f"no reflector has ever published {resource.resource}"
    deltas = sum(
        shard.stream_length if shard.entries_added is None else shard.entries_added
        for shard in resource.shards
    )
    return f"list interrupted at {deltas} deltas; no reflector leads"


def render_resource(resource: ResourceStatus) -> list[str]:
    """The table lines of one resource (also the body of the demo's live view): the
    reflector's facts and shards, then one block per consumer group."""
    if not resource.has_reflector:
        return [
            f"resource {resource.resource}  (no reflector)",
            f"  reflector leader  none: {_never_published(resource)}: nothing more will arrive "
            "until one runs with this --resource, --redis-url and --prefix",
            "",
            *_group_blocks(resource),
        ]
    lines = [f"resource {resource.resource}"]
    if resource.leader is None:
        leader = "none (no reflector leads: none runs, or its lease lapsed)"
    else:
        leader = (
            f"{resource.leader.holder} (epoch {resource.leader.epoch}, lease expires in "
            f"{_seconds(resource.leader.expires_in_s)} unless renewed)"
        )
    synced_shards = sum(1 for shard in resource.shards if shard.synced)
    lines += [
        f"  reflector leader  {leader}",
        f"  last RV           {resource.last_rv or '-'} (every shard has every event up to it)",
        f"  last list         {_when(resource.last_list_at, resource.last_list_age_s)}"
        + (f" at RV {resource.last_list_rv}" if resource.last_list_rv else ""),
        f"  synced            {_yes(resource.synced)} ({synced_shards}/{len(resource.shards)} "
        "shards listed)",
        "",
    ]
    rows = [
        (
            str(shard.shard),
            _yes(shard.synced),
            shard.rv or "-",
            str(shard.objects),
            str(shard.stream_length),
            "-" if shard.entries_added is None else str(shard.entries_added),
        )
        for shard in resource.shards
    ]
    lines += _columns(("SHARD", "SYNCED", "RV", "OBJECTS", "STREAM", "ADDED"), rows)
    lines.append("")
    return lines + _group_blocks(resource)


def _lag(lag: int | None, lag_s: float | None) -> str:
    return f"{'?' if lag is None else lag} ({'-' if lag_s is None else f'{lag_s:.1f}'} s)"


def group_summary(group: GroupStatus) -> str:
    """One line about a group: its kind, members, owned shards, lag, synced, dead letters."""
    live = len(group.live_members)
    members = f"{live}/{len(group.processors)} members live, " if group.processors else ""
    owned = (
        f"{group.owned_shards}/{len(group.shards)} shards owned, "
        if group.kind == "processor"
        else ""
    )
    return (
        f"group {group.name} ({group.kind})  {members}{owned}lag "
        f"{_lag(group.lag, group.max_lag_s)}, synced {_yes(group.synced)}, dead letters "
        f"{group.dead_letters}"
    )


def _group_blocks(resource: ResourceStatus) -> list[str]:
    if not resource.groups:
        return ["  no consumer groups (no processor or durable subscriber has run)"]
    lines: list[str] = []
    for group in resource.groups:
        lines.append("  " + group_summary(group))
        live = set(group.live_members)
        rows = []
        for shard in group.shards:
            owner = shard.owner or "-"
            if shard.owner is not None and shard.owner not in live:
                owner += " (gone)"
            rows.append(
                (
                    str(shard.shard),
                    owner,
                    _yes(shard.exists),
                    "?" if shard.lag is None else str(shard.lag),
                    str(shard.pending),
                    "-" if shard.lag_s is None else f"{shard.lag_s:.1f}",
                    str(shard.dead_letters),
                )
            )
        lines += _columns(
            ("SHARD", "OWNER", "GROUP", "LAG", "PENDING", "LAG_S", "DEAD"), rows, "    "
        )
        if group.processors:
            lines += _columns(
                ("PROCESSOR", "LIVE", "HEARTBEAT", "SHARDS"),
                (
                    (
                        p.member if p.member_of is None else f"{p.member} (of {p.member_of})",
                        _yes(p.live),
                        "-" if p.heartbeat_age_s is None else f"{_seconds(p.heartbeat_age_s)} ago",
                        f"{len(p.shards)}: {shard_ranges(p.shards)}" if p.shards else "none",
                    )
                    for p in group.processors
                ),
                "    ",
            )
        lines.append("")
    return lines


def render_table(snapshot: StatusSnapshot) -> str:
    """The snapshot for people: one block per resource."""
    lines = [f"redis {snapshot.redis_url}  prefix {snapshot.prefix}", ""]
    for resource in snapshot.resources:
        lines += render_resource(resource)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
