"""Running deployment artefacts without Docker or Kubernetes: what the compose and manifest
tests share.

A container runs ``ENTRYPOINT + command`` with ``image ENV + service environment``. Here the same
argv and environment run as a local process (:class:`LocalService`) after
:func:`localize_launch`, the one place that says what differs locally. Everything else
(subcommand, flags, env vars, defaults) is used as deployed, so a typo in a variable name, a
handler that cannot be imported or a setting the service rejects fails the test.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

from apiserver_sim.command import build_parser as simulator_parser
from apiserver_sim.settings import ENV_PREFIX as SIM_ENV_PREFIX
from apiserver_sim.settings import SimulatorSettings
from common.settings import ENV_PREFIX, settings_from_args
from informer_bus.cli import build_parser
from processor_svc.settings import ProcessorSettings
from reflector_svc.resources import ResourceSpec
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import ServiceProcess
from tests.support.paths import ROOT
from tests.support.redis_server import free_port
from tests.support.waiting import wait_until

__all__ = [
    "COMPOSE_FILE",
    "DOCKERFILE",
    "KUBERNETES_DIR",
    "ROOT",
    "Instruction",
    "Launch",
    "LocalEndpoints",
    "LocalService",
    "dockerfile_instructions",
    "final_stage",
    "image_entrypoint",
    "image_environment",
    "image_stage",
    "launch_for",
    "listening_port",
    "localize_launch",
    "pipeline_problems",
    "settings_of",
    "uid_of_user",
]

DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILE = ROOT / "docker-compose.yml"
KUBERNETES_DIR = ROOT / "deploy" / "kubernetes"
READY_TIMEOUT = 30.0

# The settings each subcommand reads, with its env prefix and the setting it listens on.
_SETTINGS: dict[str, tuple[type[Any], str, str]] = {
    "reflector": (ReflectorSettings, ENV_PREFIX, "http_port"),
    "processor": (ProcessorSettings, ENV_PREFIX, "http_port"),
    "apiserver-sim": (SimulatorSettings, SIM_ENV_PREFIX, "port"),
}


# --- the Dockerfile ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    keyword: str
    arguments: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form ``ENTRYPOINT``/``CMD``/``HEALTHCHECK CMD``."""
        text = self.arguments
        if self.keyword == "HEALTHCHECK":
            match = re.search(r"(?:^|\s)CMD\s+(.*)$", text)
            text = match.group(1) if match else ""
        text = text.strip()
        if not text.startswith("["):
            return None
        value = json.loads(text)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
        return value


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped, as Docker does
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
        pending = ""
    assert not pending, "the Dockerfile ends in a line continuation"
    return instructions


def final_stage(instructions: Sequence[Instruction]) -> list[Instruction]:
    """The instructions of the last ``FROM`` stage: what the image that runs is made of."""
    starts = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    assert starts, "the Dockerfile has no FROM"
    return list(instructions[starts[-1] :])


def image_stage(target: str | None = None) -> list[Instruction]:
    """The instructions of the stage ``docker build --target TARGET`` makes (``None``: the last
    stage, what a plain ``docker build`` makes)."""
    instructions = dockerfile_instructions()
    if target is None:
        return final_stage(instructions)
    starts = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"] + [
        len(instructions)
    ]
    for start, end in itertools.pairwise(starts):
        words = shlex.split(instructions[start].arguments)
        if [word.lower() for word in words[1:2]] == ["as"] and words[2:] == [target]:
            return list(instructions[start:end])
    raise AssertionError(f"the Dockerfile has no stage {target!r}")


def image_entrypoint(target: str | None = None) -> list[str]:
    entrypoints = [i for i in image_stage(target) if i.keyword == "ENTRYPOINT"]
    assert entrypoints, "the image has no ENTRYPOINT"
    argv = entrypoints[-1].exec_form()
    assert argv, "ENTRYPOINT must be in exec form (a JSON array)"
    return argv


def image_environment(target: str | None = None) -> dict[str, str]:
    """The image's ``ENV`` (``KEY=VALUE`` pairs; values here are never quoted or spaced)."""
    env: dict[str, str] = {}
    for ins in image_stage(target):
        if ins.keyword == "ENV":
            for pair in shlex.split(ins.arguments):
                key, sep, value = pair.partition("=")
                assert sep, f"ENV on line {ins.line}: use KEY=VALUE"
                env[key] = value
    return env


# --- a deployed command and its settings -------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What a container runs: argv (entrypoint first) and environment (image ENV included)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]

    @property
    def subcommand(self) -> str:
        """The informer-bus subcommand, or ``apiserver-sim`` for the simulator's own image."""
        if Path(self.argv[0]).name == "apiserver-sim":
            return "apiserver-sim"
        assert len(self.argv) > 1, f"no informer-bus subcommand in {self.argv}"
        return self.argv[1]

    def setting_source(self, name: str) -> tuple[str, str]:
        """The flag and the env var of setting ``name`` for this subcommand."""
        _, prefix, _ = _SETTINGS[self.subcommand]
        return "--" + name.replace("_", "-"), prefix + name.upper()


def launch_for(command: Sequence[str], env: Mapping[str, str], target: str | None = None) -> Launch:
    """A container's launch from the image's entrypoint and ENV (the image of Dockerfile stage
    ``target``, the last one by default) plus a service's ``command`` (compose) or ``args``
    (Kubernetes) and environment."""
    return Launch(
        tuple(image_entrypoint(target)) + tuple(command), {**image_environment(target), **env}
    )


def settings_of(launch: Launch) -> Any:
    """The settings the service builds from this argv and environment, through the real parser
    and the real settings loader (so defaults, env vars and flags combine as they do when it
    runs)."""
    if launch.subcommand == "apiserver-sim":
        arguments = simulator_parser().parse_args(list(launch.argv[1:]))
        return SimulatorSettings.from_args(arguments, environ=launch.env)
    cls, _, _ = _SETTINGS[launch.subcommand]
    args = build_parser().parse_args(list(launch.argv[1:]))
    with mock.patch.dict(os.environ, dict(launch.env), clear=True):
        return settings_from_args(cls, _SETTINGS[launch.subcommand][1], args)


def listening_port(launch: Launch) -> int:
    _, _, port_setting = _SETTINGS[launch.subcommand]
    port: int = getattr(settings_of(launch), port_setting)
    return port


def pipeline_problems(reflector: ReflectorSettings, processor: ProcessorSettings) -> list[str]:
    """Settings a reflector and a processor must agree on to talk through Redis."""
    problems: list[str] = []
    reflected = {ResourceSpec.parse(spec).resource_id for spec in reflector.resource}
    for resource in (*processor.resource, *processor.replicate):
        if resource not in reflected:
            problems.append(f"processor resource {resource!r} not in {sorted(reflected)}")
    for name in ("prefix", "shard_count"):
        if getattr(reflector, name) != getattr(processor, name):
            mine, theirs = getattr(reflector, name), getattr(processor, name)
            problems.append(f"{name} differs: reflector {mine}, processor {theirs}")
    return problems


# --- running it locally ------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalEndpoints:
    """The local stand-ins for what a deployment reaches over its network."""

    redis_url: str
    kube_url: str | None = None


def _with_local_netloc(url: str, local: str) -> str:
    """``url`` with the scheme, host and port of ``local`` (its path, e.g. the database, kept;
    credentials dropped: the local servers have none)."""
    here = urlsplit(local)
    return urlsplit(url)._replace(scheme=here.scheme, netloc=here.netloc).geturl()


def _replace_setting(launch: Launch, name: str, value: str) -> tuple[Launch, bool]:
    """Set ``name`` where the launch sets it (flag or env var); whether it was set there."""
    flag, env_var = launch.setting_source(name)
    argv = list(launch.argv)
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            argv[index + 1] = value
            return replace(launch, argv=tuple(argv)), True
        if arg.startswith(flag + "="):
            argv[index] = f"{flag}={value}"
            return replace(launch, argv=tuple(argv)), True
    if launch.env.get(env_var):
        return replace(launch, env={**launch.env, env_var: value}), True
    return launch, False


def localize_launch(launch: Launch, endpoints: LocalEndpoints, workdir: Path) -> tuple[Launch, int]:
    """THE differences between a deployed launch and its local run; nothing else is changed.

    * the image's entrypoint (``informer-bus``, or the simulator's ``apiserver-sim``) is this
      virtualenv's script of that name, and ``redis-server`` the one on ``PATH``;
    * the Redis URL's host and port (``redis:6379``, a cluster service) are the test's private
      redis-server's; the Kubernetes API URL's (``apiserver-sim:8001``) the local simulator's;
    * in-cluster configuration (a service account token the pod gets mounted) becomes that
      simulator's URL, since no pod token exists here;
    * the listening port (fixed in a container, where it is alone) is a free port, set where
      the launch sets it or else through its env var; redis-server also binds 127.0.0.1 only
      and keeps its files in ``workdir`` (a container's are in its volume).

    Returns the local launch and its listening port.
    """
    if launch.argv[0] == "redis-server":
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed (make test installs it)"
        port = free_port()
        local_args = ("--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir))
        return replace(launch, argv=(binary, *launch.argv[1:], *local_args)), port
    entrypoint, *rest = launch.argv
    assert entrypoint in ("informer-bus", "apiserver-sim"), f"unexpected entrypoint {entrypoint!r}"
    script = Path(sys.executable).parent / entrypoint
    local = replace(launch, argv=(str(script), *rest))
    if launch.subcommand != "apiserver-sim":
        redis_url = settings_of(launch).redis.url
        local, found = _replace_setting(
            local, "redis_url", _with_local_netloc(redis_url, endpoints.redis_url)
        )
        # The default (127.0.0.1:6379) means nothing in a container, and locally it is a Redis
        # the tests must never touch.
        assert found, "the launch does not set the Redis URL"
    if launch.subcommand == "reflector":
        settings = settings_of(launch)
        assert endpoints.kube_url is not None, "a reflector needs the simulator"
        if settings.kube.in_cluster:
            flag, env_var = local.setting_source("in_cluster")
            local = replace(
                local,
                argv=tuple(a for a in local.argv if a != flag),
                env={
                    **{k: v for k, v in local.env.items() if k != env_var},
                    local.setting_source("kube_url")[1]: endpoints.kube_url,
                },
            )
        else:
            assert settings.kube.kube_url, "the reflector names no Kubernetes API"
            local, found = _replace_setting(
                local, "kube_url", _with_local_netloc(settings.kube.kube_url, endpoints.kube_url)
            )
            assert found, "the Kubernetes API URL is neither a flag nor an env var"
    _, _, port_setting = _SETTINGS[launch.subcommand]
    port = free_port()
    local, found = _replace_setting(local, port_setting, str(port))
    if not found:
        local = replace(local, env={**local.env, local.setting_source(port_setting)[1]: str(port)})
    return local, port


class LocalService(ServiceProcess):
    """A localized launch as a child process, probed on its listening port.

    Only the launch's environment reaches it (plus ``PATH`` and the like: no
    ``INFORMER_BUS_*`` variable of the test run leaks in).
    """

    what = "service"

    def __init__(self, launch: Launch, port: int, log_path: Path) -> None:
        super().__init__(launch.argv, log_path, env=launch.env)
        self.port = port

    def command(self) -> list[str]:
        return list(self.args)

    def url(self, timeout: float = 15.0) -> str:
        assert self.running(), f"{self.args[1]} exited early:\n{self.log()}"
        return f"http://127.0.0.1:{self.port}"

    def probe(self, path: str = "/readyz") -> int:
        """The HTTP status of a probe; 0 while nothing listens yet."""
        try:
            return super().probe(path)
        except OSError:  # nothing listens yet (HTTP errors are statuses, handled above)
            return 0

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until both ``/healthz`` and ``/readyz`` answer 200."""
        wait_until(
            lambda: self.probe("/healthz") == 200 and self.probe("/readyz") == 200,
            timeout,
            interval=0.2,
            what=lambda: f"{' '.join(self.args[1:2])} to be ready; its log:\n{self.log()}",
        )


def uid_of_user(user: str) -> int:
    """The numeric uid of a Dockerfile ``USER uid[:gid]`` (names cannot be checked by
    Kubernetes' runAsNonRoot, so only numbers are accepted)."""
    uid = user.split(":", 1)[0]
    assert re.fullmatch(r"[0-9]+", uid), f"USER {user!r} is not numeric"
    return int(uid)
