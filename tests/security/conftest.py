"""The security tests' fixtures: certificates, a TLS-only redis-server with ACL users, its
admin client, password files (:mod:`tests.support.secured_redis` makes them)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from apiserver_sim import SimulatorSettings
from tests.support.secured_redis import (
    PROCESSOR_PASSWORD,
    REFLECTOR_PASSWORD,
    Certs,
    TlsRedisServer,
    _openssl,
    _signed,
)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the TLS test certificates")
    workdir = Path(tmp_path_factory.mktemp("certs"))
    for ca in ("ca", "untrusted"):
        _openssl(
            workdir,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.crt",
            "-days",
            "2",
            "-subj",
            f"/CN=informer-bus test {ca} CA",
        )
    _signed(workdir, "server", "/CN=localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")  # fmt: skip
    _signed(workdir, "client", "/CN=informer-bus", "extendedKeyUsage=clientAuth\n")
    return Certs(
        ca=workdir / "ca.crt",
        server_cert=workdir / "server.crt",
        server_key=workdir / "server.key",
        client_cert=workdir / "client.crt",
        client_key=workdir / "client.key",
        untrusted_ca=workdir / "untrusted.crt",
    )


@pytest.fixture(scope="session")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[TlsRedisServer]:
    server = TlsRedisServer(Path(tmp_path_factory.mktemp("tls-redis")), certs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tls_admin(tls_redis: TlsRedisServer) -> Iterator[redis.Redis]:
    """The admin client on an emptied server with an empty ACL log."""
    client = tls_redis.admin_client()
    client.flushall()
    client.acl_log_reset()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def password_files(tmp_path: Path) -> dict[str, Path]:
    """``{"reflector": path, "processor": path}``: each user's password in a file of its own,
    readable by the owner only, with the trailing newline an editor leaves."""
    files = {}
    for user, password in (("reflector", REFLECTOR_PASSWORD), ("processor", PROCESSOR_PASSWORD)):
        path = tmp_path / f"{user}.password"
        path.write_text(password + "\n")
        path.chmod(0o600)
        files[user] = path
    return files


@pytest.fixture
def sim_settings() -> SimulatorSettings:
    """Bookmarks every 0.1 s; the other timings as in production."""
    return SimulatorSettings(bookmark_interval=0.1)
