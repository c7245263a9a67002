"""A TLS-only, password-protected redis-server with ACL users, and the certificates it needs.

Certificates are made with the ``openssl`` command line in a temporary directory: a CA, a
server certificate for 127.0.0.1/localhost and a client certificate signed by it, plus a second,
unrelated CA that a client must not trust the server with. The server listens on TLS only
(``--port 0``), requires client certificates and knows four users: ``default`` (the tests' own
admin login), and ``reflector``, ``processor`` and ``reader`` (for ``status``/``subscribe``)
limited to the commands and keys that docs/operations.md lists as their minimal ACL -- so every
test that runs them here also proves that ACL sufficient."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tests.support.redis_server import RedisServer, free_port

ADMIN_PASSWORD = "admin-Hx3-not-for-services"
REFLECTOR_PASSWORD = "rfl-Q7pz-c4f9e2-secret"
PROCESSOR_PASSWORD = "prc-W2kv-81d0aa-secret"
READER_PASSWORD = "rdr-L5nc-0b7e31-secret"

_CONNECTION = ("+ping", "+hello", "+multi", "+exec", "+evalsha", "+eval", "+script|load",
               "+script|exists")  # fmt: skip
_LEASES = ("+hget", "+hgetall", "+hmget", "+hset", "+hdel", "+del", "+get", "+set", "+incr",
           "+pexpire", "+persist", "+pttl", "+time")  # fmt: skip
REFLECTOR_ACL = (*_CONNECTION, *_LEASES, "+xadd", "+xtrim", "+xpending", "+xlen", "+xrange",
                 "+xinfo|stream", "+xinfo|groups", "+zrange")  # fmt: skip
"""The commands the reflector's user gets (beyond them: nothing, on keys ``ib:*`` only)."""
PROCESSOR_ACL = (*_CONNECTION, *_LEASES, "+client|id", "+client|unblock", "+xreadgroup",
                 "+xread", "+xack", "+xgroup|create", "+xgroup|setid", "+xpending",
                 "+xinfo|groups", "+xinfo|stream", "+xrange", "+xlen", "+zadd", "+zrem",
                 "+zrange", "+zrangebyscore", "+zremrangebyscore")  # fmt: skip
"""The commands a processor's user gets."""


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    untrusted_ca: Path
    """A CA that signed nothing the server presents."""


def _openssl(workdir: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True, timeout=30)


def _signed(workdir: Path, name: str, subject: str, extensions: str) -> None:
    """``name.key`` and ``name.crt``, signed by ``ca.crt``."""
    _openssl(
        workdir,
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        subject,
    )
    (workdir / f"{name}.ext").write_text(extensions)
    _openssl(workdir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.crt",
             "-extfile", f"{name}.ext")  # fmt: skip


class TlsRedisServer(RedisServer):
    """A redis-server on one TLS port (no plain port), requiring client certificates and a
    password; ``url`` is ``rediss://`` without credentials. It keeps its port across
    :meth:`stop`/:meth:`start`, so a test can restart it under running clients."""

    def __init__(self, workdir: Path, certs: Certs) -> None:
        self.certs = certs
        self.tls_port = free_port()
        super().__init__(
            workdir,
            "--port", "0", "--tls-port", str(self.tls_port),
            "--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key),
            "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "yes",
            "--requirepass", ADMIN_PASSWORD,
            "--user", "reflector", "on", f">{REFLECTOR_PASSWORD}", "~ib:*", "resetchannels",
            "-@all", *REFLECTOR_ACL,
            "--user", "processor", "on", f">{PROCESSOR_PASSWORD}", "~ib:*", "resetchannels",
            "-@all", *PROCESSOR_ACL,
            "--user", "reader", "on", f">{READER_PASSWORD}", "~ib:*", "resetchannels", "-@all",
            "+@read", "+@connection", "+time",
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def _pick_port(self) -> int:
        return self.tls_port

    def flags(self, *, ca: Path | None = None, client_cert: bool = True) -> list[str]:
        """The service flags that reach this server (no credentials): its URL, the CA that
        verifies it (``ca`` instead when given) and the client certificate."""
        flags = ["--redis-url", self.url, "--redis-tls-ca-file", str(ca or self.certs.ca)]
        if client_cert:
            flags += ["--redis-tls-cert-file", str(self.certs.client_cert)]
            flags += ["--redis-tls-key-file", str(self.certs.client_key)]
        return flags

    def tls_kwargs(self) -> dict[str, Any]:
        return {
            "ssl_ca_certs": str(self.certs.ca),
            "ssl_certfile": str(self.certs.client_cert),
            "ssl_keyfile": str(self.certs.client_key),
        }

    def probe_client(self) -> redis.Redis:
        return self.admin_client(socket_timeout=1)

    def admin_client(self, **kwargs: Any) -> redis.Redis:
        """A client logged in as ``default`` (every command), not decoding responses."""
        client: redis.Redis = redis.Redis.from_url(
            self.url, password=ADMIN_PASSWORD, **self.tls_kwargs(), **kwargs
        )
        return client
