"""The console under a real uvicorn server, for the tests that need real HTTP
(tests/integration/test_web*.py): a Host header of the client's choosing, the peer address the
server sees, cookies as a browser gets them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from shardq.web import WebConfig, create_app
from shardq.web.app import UVICORN_OPTIONS
from support.helpers import free_port, wait_for


@contextmanager
def serving(config: WebConfig) -> Iterator[str]:
    """The console under uvicorn in a thread on 127.0.0.1 (whatever ``config.host`` says: the
    app's rules follow its config, the socket stays on loopback), served with the options
    `shardq web` uses; stopped on exit."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=port, **UVICORN_OPTIONS)
    )
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), 20, "console did not start")
        assert server.started, "the console failed to start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        assert not thread.is_alive(), "the console did not stop"
