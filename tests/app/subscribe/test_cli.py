"""``informer-bus subscribe``: output formats, start flags, filters, pipes, Ctrl-C, mistakes."""

from __future__ import annotations

import shlex
import signal
import time
from datetime import datetime

import pytest
import redis

from common.wire import FIELD
from informer_bus.cli import main
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.bus import Bus
from tests.support.cli import one_line_error, run_command
from tests.support.redis_server import RedisServer
from tests.support.subscribe_cli import (
    PROGRAM,
    SUBSCRIBE,
    Publisher,
    add_raw_entry,
    as_rows,
    id_order,
    json_lines,
    printed_rows,
    run_subscribe,
    start_subscribe,
    wait_for_a_later_millisecond,
)


def test_from_now_prints_only_later_deltas(
    redis_server: RedisServer, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/before-{i}", "1") for i in range(8)))
    before = set(as_rows(bus.all_entries()))
    process = start_subscribe(redis_server.url, "pods", "--count", "1")
    try:
        # When the subscriber has settled its start is unknown from outside: publish until it
        # prints, then check that what it printed came after it started.
        for i in range(300):
            publisher.publish(updated(f"ns/before-{i % 8}", str(10 + i)))
            if process.poll() is not None:
                break
            time.sleep(0.05)
        stdout, stderr = process.communicate(timeout=15)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    [row] = printed_rows(stdout)
    assert row not in before
    assert row[2] == "Updated"


def test_from_id_type_namespace_and_count(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"{ns}/p{i}", "1") for ns in ("shop", "blog") for i in range(6)))
    mark = max((e.stream_id for e in bus.all_entries()), key=id_order)
    wait_for_a_later_millisecond(redis_client, mark)
    publisher.publish(*(updated(f"{ns}/p{i}", "2") for ns in ("shop", "blog") for i in range(6)))
    publisher.publish(deleted("shop/p1", "3"), deleted("blog/p1", "3"), added("shop/new", "4"))

    result = run_subscribe(
        redis_server.url, "pods", "--from-id", mark, "--type", "Updated",
        "--type", "Deleted,Replaced", "--namespace", "shop", "--count", "7",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    expected = [
        row for row in as_rows(bus.all_entries())
        if id_order(row[1]) > id_order(mark) and row[2] != "Added" and row[3].startswith("shop/")
    ]  # fmt: skip
    assert len(expected) == 7
    assert sorted(printed_rows(result.stdout)) == sorted(expected)


def test_table_output(redis_server: RedisServer, publisher: Publisher, bus: Bus) -> None:
    publisher.publish(added("shop/web", "11"), added("node-1", "12"), deleted("shop/web", "13"))

    result = run_subscribe(
        redis_server.url, "pods", "--from-beginning", "--output", "table", "--count", "3"
    )

    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["TIME", "SHARD", "TYPE", "KEY", "RESOURCEVERSION"]
    rows = []
    for line in lines:
        when, shard, kind, key, rv = line.split()
        datetime.fromisoformat(when)  # a readable timestamp
        assert line.index(key) == header.index("KEY")  # fixed-width columns
        rows.append((int(shard), kind, key, rv))
    assert sorted(rows) == sorted((e.shard, e.type, e.key, e.rv) for e in bus.all_entries())


def test_a_corrupt_entry_is_a_warning_and_later_entries_still_print(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(added("ns/a", "1"))
    stream = bus.shards[1].stream
    garbage_id = add_raw_entry(redis_client, stream, FIELD, b"\xff garbage")
    publisher.publish(added("ns/b", "2"), updated("ns/a", "3"))

    result = run_subscribe(redis_server.url, "pods", "--from-beginning", "--count", "3")

    assert result.returncode == 0, result.stderr
    assert sorted(row[3:] for row in printed_rows(result.stdout)) == [
        ("ns/a", "1"), ("ns/a", "3"), ("ns/b", "2"),
    ]  # fmt: skip
    [warning] = result.stderr.splitlines()
    assert warning.startswith(f"{PROGRAM}: warning: ")
    assert garbage_id in warning
    assert stream in warning


@pytest.mark.parametrize("deltas", [1, 400], ids=["idle-after-one", "busy"])
def test_a_closed_pipe_ends_it_quietly(
    redis_server: RedisServer, publisher: Publisher, deltas: int
) -> None:
    publisher.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(deltas)))
    command = shlex.join([*SUBSCRIBE, "pods", "--from-beginning", "--redis-url", redis_server.url])

    # pipefail: the status is the subscriber's, not head's
    result = run_command(["bash", "-o", "pipefail", "-c"], f"{command} | head -1")

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    [line] = json_lines(result.stdout)
    assert line["type"] == "Added"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_exits_0_without_a_traceback(
    redis_server: RedisServer, publisher: Publisher, signum: signal.Signals
) -> None:
    """One rule for every command (issue 34): a clean stop on the first signal exits 0 (plain
    subscribe exited 130 on Ctrl-C and was killed by SIGTERM, 143, where --sink exited 0)."""
    publisher.publish(added("ns/a", "1"))
    process = start_subscribe(redis_server.url, "pods", "--from-beginning")
    try:
        assert process.stdout is not None
        assert '"ns/a"' in process.stdout.readline()  # it runs, now waiting for more
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=15)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert stderr == (
        f"{PROGRAM}: {signum.name}: stopping (up to 10 s; a second signal ends it at once)\n"
    )


def test_unknown_resource_and_unreachable_redis_are_one_line_errors(
    redis_server: RedisServer, publisher: Publisher
) -> None:
    publisher.publish(added("ns/a", "1"))
    line = one_line_error(run_subscribe(redis_server.url, "widgets.example.com"), PROGRAM)
    assert "ib:{widgets.example.com:*}:deltas" in line
    assert "--prefix" in line
    line = one_line_error(
        run_subscribe(redis_server.url, "pods", env={"INFORMER_BUS_PREFIX": "other"}), PROGRAM
    )
    assert "other:{pods:*}:deltas" in line
    line = one_line_error(
        run_command(SUBSCRIBE, "pods", "--redis-url", "redis://:secret@127.0.0.1:1/0"), PROGRAM
    )
    assert "redis://:***@127.0.0.1:1/0" in line  # common.redis_config.redacted_url, as everywhere
    assert "secret" not in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--from-id", "yesterday"], "invalid stream entry ID 'yesterday'"),
        (["--from-id", "1-2-3"], "invalid stream entry ID"),
        (["--from-beginning", "--from-now"], "--from-beginning and --from-now exclude"),
        (["--type", "Added,Modified"], "unknown delta type 'Modified'; use Added, Updated"),
        (["--output", "yaml"], "unknown output 'yaml'; use json, table or cloudevents"),
        (["--count", "0"], "--count must be an integer >= 1"),
        (["--shards", "many"], "--shards must be an integer >= 1"),
        (["--prefix", "a b"], "invalid key prefix"),
        (["--group", "audit", "--from-id", "1-0"], "--from-id and --group exclude each other"),
        (["--group", "a:b"], "group name 'a:b' is invalid"),
        # the CloudEvents output and sink (docs/cloudevents.md)
        (["--sink", "ftp://example.com/x"], "--sink must be an http:// or https:// URL"),
        (["--sink", "localhost:8080"], "--sink must be an http:// or https:// URL"),
        (["--sink", "http://r/", "--sink-mode", "bogus"],
         "unknown --sink-mode 'bogus'; use binary or structured"),
        (["--output", "cloudevents", "--output", "table"],
         "--output cloudevents and --output table exclude each other"),
        (["--sink", "http://r/", "--output", "cloudevents"],
         "--output cloudevents and --sink exclude each other"),
        (["--sink-mode", "binary"], "--sink-mode needs --sink URL"),
        (["--sink", "http://r/", "--sink-backoff", "0"], "--sink-backoff must be a number"),
        (["--sink", "http://r/", "--sink-backoff", "2", "--sink-backoff-max", "1"],
         "--sink-backoff-max (1) is below --sink-backoff (2)"),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line_errors(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["subscribe", "pods", "--redis-url", "redis://127.0.0.1:1/0", *args])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"{PROGRAM}: error: ")
    assert expected in line


def test_help_names_the_flags_and_env_vars() -> None:
    result = run_command(SUBSCRIBE, "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for flag in ("--from-beginning", "--from-now", "--from-id", "--type", "--namespace",
                 "--output", "--count", "--shards", "--group"):  # fmt: skip
        assert flag in text
    assert "env INFORMER_BUS_REDIS_URL" in text
    assert "env INFORMER_BUS_PREFIX" in text
