"""Liveness and readiness of the workers and dispatchers of this process, over HTTP.

``/healthz`` answers 200 while every loop makes progress and none keeps failing for a reason
other than Redis being unreachable (a bug, a corrupt record): 503 tells an orchestrator to
restart the process, and the JSON body names the loops (``stuck``: no progress within the
loop's bound, derived from its interval; ``problems``: why).  ``/readyz`` answers 200 once
started and while no loop is in an error streak: Redis unreachable makes a process not ready,
never unhealthy, so an outage of any length is ridden out without restarts.  Readiness is not a
PING per request: it is the loops' own latest Redis calls, a cached check (a worker's heartbeat
calls Redis every ``heartbeat_interval``, a dispatcher's lease round every ``renew_interval``),
so it is at most about one interval plus the socket timeout old, and a probe costs Redis
nothing.  ``/metrics`` serves Prometheus' exposition, as before.  The server runs in a
thread, so it answers even while the event loop is blocked (and then reports the blocked loops
as not making progress).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

log = logging.getLogger("shardq.health")


@dataclass(frozen=True, slots=True)
class Status:
    """One worker or dispatcher: what is wrong (empty: healthy) and whether it is ready."""

    role: str
    queue: str
    problems: list[str]
    ready: bool
    stuck: list[str] = field(default_factory=list)  # loops that stopped making progress

    @property
    def healthy(self) -> bool:
        return not self.problems


Source = Callable[[], Status]
_sources: list[Source] = []
_lock = threading.Lock()


def register(source: Source) -> None:
    with _lock:
        _sources.append(source)


def unregister(source: Source) -> None:
    with _lock:
        if source in _sources:
            _sources.remove(source)


def statuses() -> list[Status]:
    with _lock:
        sources = list(_sources)
    out = []
    for source in sources:
        try:
            out.append(source())
        except Exception as exc:  # a status that cannot be read is a problem in itself
            out.append(Status("?", "?", [f"status unavailable: {exc}"], False))
    return out


def _answer(start: Callable[..., Any], ok: bool, body: dict[str, Any]) -> Iterable[bytes]:
    data = json.dumps(body).encode()
    start(
        "200 OK" if ok else "503 Service Unavailable",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]


def app() -> Callable[..., Iterable[bytes]]:
    """The WSGI app: /healthz, /readyz, and Prometheus' /metrics for everything else."""
    metrics_app = make_wsgi_app()

    def serve(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            current = statuses()
            if path == "/healthz":
                ok = all(s.healthy for s in current)
            else:
                ok = bool(current) and all(s.ready for s in current)
            return _answer(start, ok, {"ok": ok, "processes": [asdict(s) for s in current]})
        result: Iterable[bytes] = metrics_app(environ, start)
        return result

    return serve


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve(port: int, addr: str = "127.0.0.1") -> WSGIServer:
    """Serve /metrics, /healthz and /readyz on ``addr:port`` from a background thread."""
    server = make_server(addr, port, app(), _Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="shardq-http", daemon=True)
    thread.start()
    log.info("metrics and health on http://%s:%d (/metrics /healthz /readyz)", addr, port)
    return server
