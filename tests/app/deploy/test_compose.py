"""docker-compose.yml: valid against the Compose specification, right where the specification
cannot tell (scaling, durability, profiles, probes), and every service's command and
environment start and reach ready when run locally (no Docker engine needed).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import redis
import yaml

from tests.app.deploy.support import (
    COMPOSE_FILE,
    Launch,
    LocalEndpoints,
    LocalService,
    launch_for,
    listening_port,
    localize_launch,
    pipeline_problems,
    settings_of,
)
from tests.support.bus import Bus
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

SCHEMA_FILE = Path(__file__).parent / "schemas" / "compose-spec.json"
INFORMER_BUS_SERVICES = ("apiserver-sim", "reflector", "processor")
LOCAL_PROCESSORS = 2
"""Processors started locally: more than one shows that scaling needs no per-replica config."""

_INTERPOLATION = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}"
)


def load_compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    return document


COMPOSE = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]


def interpolate(value: str, environ: Mapping[str, str] | None = None) -> str:
    """``${NAME}``, ``${NAME-default}``, ``${NAME:-default}`` and ``$$`` as Compose resolves
    them (by default with nothing set, i.e. what a plain ``docker compose up`` uses); any other
    ``$`` form fails, so this file stays within what the test understands."""
    env = environ or {}

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "\0"
        name, op, default = match.group("name"), match.group("op"), match.group("default")
        current = env.get(name)
        if op == ":-":
            return current or default
        if op == "-":
            return default if current is None else current
        assert current is not None, f"${{{name}}} has no default"
        return current

    resolved = _INTERPOLATION.sub(substitute, value)
    assert "$" not in resolved, f"unsupported interpolation in {value!r}"
    return resolved.replace("\0", "$")


def compose_environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's ``environment`` (mapping or ``KEY=VALUE`` list) as the container sees it."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    env: dict[str, str] = {}
    for key, value in raw.items():
        assert value is not None, f"{key} would be taken from the host's environment"
        text = str(value).lower() if isinstance(value, bool) else str(value)
        env[key] = interpolate(text)
    return env


def compose_launch(name: str) -> Launch:
    """What the container of service ``name`` runs: the image's entrypoint and ENV, then the
    service's ``command`` and ``environment``; redis runs its own image's command."""
    service = SERVICES[name]
    command = service.get("command")
    assert isinstance(command, list), f"{name}: give command as a list (exec form)"
    if name == "redis":
        return Launch(tuple(command), compose_environment(service))
    return launch_for(command, compose_environment(service), service["build"].get("target"))


def healthcheck_url(name: str) -> str:
    """The URL an informer-bus service's healthcheck opens (``python -c`` with urllib)."""
    test = SERVICES[name]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], f"{name}: healthcheck {test}"
    urls = re.findall(r"http://[^'\"\s]+", test[3])
    assert len(urls) == 1, f"{name}: one URL expected in {test[3]!r}"
    return str(urls[0])


# --- the file -----------------------------------------------------------------------------------


# The drafts the Compose schema has declared; its "$schema" is spelt https://.../draft-07/schema,
# which jsonschema's own lookup (http://...#) does not recognise, so pick the draft by name.
_DRAFTS = {
    "draft-07": jsonschema.Draft7Validator,
    "2019-09": jsonschema.Draft201909Validator,
    "2020-12": jsonschema.Draft202012Validator,
}


def compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    drafts = [cls for name, cls in _DRAFTS.items() if name in schema["$schema"]]
    assert len(drafts) == 1, f"unknown draft {schema['$schema']!r}"
    drafts[0].check_schema(schema)
    return drafts[0](schema)


def compose_schema_errors(document: Mapping[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in compose_validator().iter_errors(document)
    ]


def test_the_vendored_schema_is_draft_07() -> None:
    assert isinstance(compose_validator(), jsonschema.Draft7Validator)


def test_compose_file_follows_the_compose_specification() -> None:
    assert compose_schema_errors(COMPOSE) == []


def test_the_schema_check_catches_mistakes() -> None:
    misspelt = copy.deepcopy(COMPOSE)
    misspelt["services"]["processor"]["comand"] = ["processor"]
    assert any("comand" in error for error in compose_schema_errors(misspelt))
    misspelt_condition = copy.deepcopy(COMPOSE)
    misspelt_condition["services"]["processor"]["depends_on"]["redis"] = {"conditon": "x"}
    assert compose_schema_errors(misspelt_condition)


def test_processors_scale_without_per_replica_settings() -> None:
    processor = SERVICES["processor"]
    for fixed in ("ports", "container_name", "hostname"):
        assert fixed not in processor, f"processor sets {fixed}: --scale would clash"
    launch = compose_launch("processor")
    assert "--member-id" not in launch.argv
    assert "INFORMER_BUS_MEMBER_ID" not in launch.env


def test_two_leader_elected_reflectors() -> None:
    reflector = SERVICES["reflector"]
    assert reflector["deploy"]["replicas"] == 2
    for fixed in ("ports", "container_name", "hostname"):
        assert fixed not in reflector, f"reflector sets {fixed}: two replicas would clash"
    launch = compose_launch("reflector")
    assert "--identity" not in launch.argv
    assert "INFORMER_BUS_IDENTITY" not in launch.env


def test_redis_keeps_its_data_in_an_append_only_file_on_a_volume() -> None:
    command = SERVICES["redis"]["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "--dir" not in command  # the image's /data, where the volume is
    mounts = [str(volume).split(":") for volume in SERVICES["redis"]["volumes"]]
    assert [source for source, target, *_ in mounts if target == "/data"] == ["redis-data"]
    assert "redis-data" in COMPOSE["volumes"]


def test_the_simulator_runs_only_in_the_demo_profile() -> None:
    assert SERVICES["apiserver-sim"]["profiles"] == ["demo"]
    always = {name for name, service in SERVICES.items() if not service.get("profiles")}
    assert always == {"redis", "reflector", "processor"}


def test_plain_compose_up_starts_the_demo_profile_through_the_env_file() -> None:
    # Without a simulator, a plain `docker compose up` would start reflectors with nothing to
    # watch: `.env` (read by Compose from the project directory) selects the demo profile.
    env_file = ROOT / ".env"
    settings = dict(
        line.split("=", 1)
        for line in env_file.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert settings.get("COMPOSE_PROFILES") == "demo"
    assert ".env" in (ROOT / ".dockerignore").read_text().split()  # not baked into the image


def test_dependencies_name_services_and_tolerate_profiles() -> None:
    for name, service in SERVICES.items():
        depends_on = service.get("depends_on") or {}
        if isinstance(depends_on, list):  # the short form: started, required
            depends_on = {dependency: {} for dependency in depends_on}
        for dependency, condition in depends_on.items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            target = SERVICES[dependency]
            if condition and condition.get("condition") == "service_healthy":
                assert "healthcheck" in target, f"{dependency} has no healthcheck to wait for"
            if set(target.get("profiles") or ()) - set(service.get("profiles") or ()):
                assert condition.get("required") is False, (
                    f"{name} needs {dependency}, which only runs in a profile: "
                    "plain `docker compose up` would fail"
                )


@pytest.mark.parametrize("name", INFORMER_BUS_SERVICES)
def test_healthchecks_probe_healthz_on_the_listening_port(name: str) -> None:
    url = urlsplit(healthcheck_url(name))
    assert url.hostname == "127.0.0.1"
    assert url.path == "/healthz"
    assert url.port == listening_port(compose_launch(name))


@pytest.mark.parametrize("name", ["reflector", "processor"])
def test_metrics_and_probes_are_served_to_other_containers(name: str) -> None:
    """The services listen on loopback unless asked (issue 34): a container asks, so that a
    Prometheus in another container can scrape it."""
    launch = compose_launch(name)
    assert launch.env.get("INFORMER_BUS_HTTP_HOST") == "0.0.0.0"
    assert settings_of(launch).http_host == "0.0.0.0"


def test_redis_healthcheck_pings() -> None:
    assert SERVICES["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_the_reflector_watches_the_simulator_by_default() -> None:
    reflector = settings_of(compose_launch("reflector"))
    simulator = compose_launch("apiserver-sim")
    kube = urlsplit(reflector.kube.kube_url)
    assert (kube.hostname, kube.port) == ("apiserver-sim", listening_port(simulator))
    # Reached from other containers: it must not listen on loopback only.
    assert settings_of(simulator).host == "0.0.0.0"


def test_the_real_cluster_switch_is_an_empty_kube_url() -> None:
    raw = SERVICES["reflector"]["environment"]["INFORMER_BUS_KUBE_URL"]
    assert interpolate(raw, {"INFORMER_BUS_KUBE_URL": ""}) == ""
    proxy = "http://host.docker.internal:8001"
    assert interpolate(raw, {"INFORMER_BUS_KUBE_URL": proxy}) == proxy


def test_the_reflector_and_the_processor_share_a_resource_and_layout() -> None:
    reflector = settings_of(compose_launch("reflector"))
    processor = settings_of(compose_launch("processor"))
    assert pipeline_problems(reflector, processor) == []


def test_informer_bus_services_run_the_image_built_from_this_repository() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in INFORMER_BUS_SERVICES:
        service = SERVICES[name]
        context = (COMPOSE_FILE.parent / service["build"]["context"]).resolve()
        assert context == ROOT
        assert (context / service["build"]["dockerfile"]).is_file()
        if name == "apiserver-sim":  # not part of the product: an image of its own
            assert service["image"] == f"informer-bus-apiserver-sim:{version}"
            assert service["build"]["target"] == "apiserver-sim"
            assert compose_launch(name).argv[0] == "apiserver-sim"
        else:
            assert service["image"] == f"informer-bus:{version}"
            assert "target" not in service["build"]  # the product's image, the last stage


# --- run locally ---------------------------------------------------------------------------------


class LocalStack:
    """The compose services as local processes: redis, the simulator, the reflector replicas
    and ``LOCAL_PROCESSORS`` processors, all from this file's commands and environments."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.services: dict[str, list[LocalService]] = {}
        self.redis_url = ""

    def start(self, name: str, endpoints: LocalEndpoints, replicas: int = 1) -> list[LocalService]:
        """Start ``name`` once the dependencies it waits for in compose are healthy."""
        for dependency, condition in (SERVICES[name].get("depends_on") or {}).items():
            if condition.get("condition") == "service_healthy" and dependency in self.services:
                for service in self.services[dependency]:
                    if dependency == "redis":
                        self.wait_for_redis()
                    else:
                        service.wait_ready()
        started = []
        for replica in range(replicas):
            launch, port = localize_launch(compose_launch(name), endpoints, self.workdir)
            log = self.workdir / f"{name}-{replica}.log"
            started.append(LocalService(launch, port, log).start())
        self.services[name] = started
        return started

    def start_all(self) -> None:
        nothing = LocalEndpoints(redis_url="")
        (redis_service,) = self.start("redis", nothing)
        self.redis_url = f"redis://127.0.0.1:{redis_service.port}/0"
        (simulator,) = self.start("apiserver-sim", nothing)
        endpoints = LocalEndpoints(redis_url=self.redis_url, kube_url=simulator.url())
        self.start("reflector", endpoints, SERVICES["reflector"]["deploy"]["replicas"])
        self.start("processor", endpoints, LOCAL_PROCESSORS)

    def wait_for_redis(self) -> None:
        client = redis.Redis.from_url(self.redis_url, socket_timeout=1)
        try:
            wait_until(lambda: _pings(client), 10, what="the compose redis to answer PING")
        finally:
            client.close()

    def stop_all(self) -> None:
        for services in reversed(list(self.services.values())):
            for service in services:
                try:
                    service.terminate(15)
                except (AssertionError, TimeoutError):
                    pass
                finally:
                    service.close()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("compose"))
    try:
        local.start_all()
        yield local
    finally:
        local.stop_all()


@pytest.fixture
def bus(stack: LocalStack) -> Iterator[Bus]:
    client = redis.Redis.from_url(stack.redis_url)
    try:
        yield Bus(client, "pods", shard_count=settings_of(compose_launch("processor")).shard_count)
    finally:
        client.close()


def test_the_redis_command_runs_with_the_append_only_file(stack: LocalStack) -> None:
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        assert client.ping()
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("dir")["dir"] == str(stack.workdir)
    finally:
        client.close()


@pytest.mark.parametrize("name", INFORMER_BUS_SERVICES)
def test_each_service_starts_and_reaches_ready(stack: LocalStack, name: str) -> None:
    for service in stack.services[name]:
        service.wait_ready()  # /healthz and /readyz 200 at the same moment
        # Readiness may flap later (a standby reflector that takes over is not ready until
        # synced); liveness must not.
        assert service.probe("/healthz") == 200


def test_one_reflector_leads_and_publishes_the_simulated_pods(stack: LocalStack, bus: Bus) -> None:
    reflectors = stack.services["reflector"]
    for reflector in reflectors:
        reflector.wait_ready()
    pids = {str(reflector.pid) for reflector in reflectors}
    holder = wait_until(bus.holder, 10, what="a reflector to lead")
    assert holder.split("/")[1] in pids
    wait_until(bus.synced, 30, what="the leader to publish its first list")
    assert bus.length() > 0


def test_processors_share_every_shard(stack: LocalStack, bus: Bus) -> None:
    processors = stack.services["processor"]
    pids = {str(processor.pid) for processor in processors}

    def shared() -> bool:
        holders = bus.shard_holders().values()
        return None not in holders and {h.split("/")[1] for h in holders if h} == pids

    def why() -> str:  # a failure names the holders and shows what each processor said
        logs = "\n".join(f"--- {p.pid}:\n" + "\n".join(p.log().splitlines()[-25:])
                         for p in processors)  # fmt: skip
        return f"shards shared: {bus.shard_holders()}\n{logs}"

    wait_until(shared, 30, interval=0.2, what=why)
    for processor in processors:
        processor.wait_ready()


# --- the documented tools against the stack -------------------------------------------------------

_EXEC = re.compile(
    r"^\s*#?\s*docker compose exec (?P<options>(?:-\S+ )*)(?P<service>[\w-]+) "
    r"(?P<cmd>.+?)\s*(?:#.*)?$"
)
_DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "deploy.md", COMPOSE_FILE)


def documented_exec_commands() -> list[tuple[str, str, str]]:
    """Every ``docker compose exec SERVICE COMMAND`` the docs and the compose file show, as
    (document, service, command)."""
    found = []
    for document in _DOCUMENTS:
        for line in document.read_text().splitlines():
            if match := _EXEC.match(line.strip("`")):
                found.append((document.name, match["service"], match["cmd"].strip("`")))
    return found


def test_the_docs_show_status_and_subscribe_against_the_stack() -> None:
    commands = {cmd.split()[1] for _, _, cmd in documented_exec_commands()}
    assert {"status", "subscribe"} <= commands


@pytest.mark.parametrize(("document", "service", "command"), documented_exec_commands())
def test_a_documented_exec_command_runs_in_the_service_environment(
    stack: LocalStack, bus: Bus, document: str, service: str, command: str
) -> None:
    """What ``docker compose exec`` runs: the command as written, in the service's container
    environment (image ENV, then compose ``environment``), with only the Redis host localized."""
    argv = command.split()
    assert argv[0] == "informer-bus", f"{document}: {command!r} does not run informer-bus"
    wait_until(bus.synced, 60, what="the stack's reflector to publish its first list")
    launch = launch_for(SERVICES[service]["command"], compose_environment(SERVICES[service]))
    redis_url = settings_of(launch).redis.url
    local_url = urlsplit(redis_url)._replace(netloc=urlsplit(stack.redis_url).netloc).geturl()
    env = {**launch.env, "INFORMER_BUS_REDIS_URL": local_url, "PATH": "/usr/bin:/bin"}
    assert launch.env.get("INFORMER_BUS_REDIS_URL") == redis_url, "the URL comes from the env"
    script = Path(sys.executable).parent / "informer-bus"
    done = subprocess.run(
        [str(script), *argv[1:]], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"{document}: {command!r} exited {done.returncode}: {done.stderr}"
    assert done.stdout.strip(), f"{document}: {command!r} printed nothing"
