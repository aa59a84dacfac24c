"""Commands clients send to the primaries while a block runs, read with MONITOR.

The test cluster is shared by the session's tests, so callers pick out their own by a
``needle`` (a queue's name appears in every key of its commands).  Commands scripts run inside
Redis are not shown by MONITOR: a script call counts once, as the FCALL that started it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from support.helpers import primaries

# Sent to each primary when the window closes, so a listener blocked on a quiet node wakes.
WAKE = "shardq-test-monitor-wake"


@contextmanager
def monitored(client: Any, needle: str) -> Iterator[list[str]]:
    """Yield a list that fills with every command (its MONITOR text) that any primary received
    while the block ran and that contains ``needle``."""
    seen: list[str] = []
    stop = threading.Event()
    ready: list[threading.Event] = []
    threads = []

    def listen(node: Any, started: threading.Event) -> None:
        # A connection of its own with no read timeout: a quiet node sends nothing for as long
        # as it is quiet, and the window's end wakes it (WAKE).
        kwargs = {**node.connection_pool.connection_kwargs, "socket_timeout": None}
        own = redis.Redis(connection_pool=redis.ConnectionPool(**kwargs))
        with own.monitor() as monitor:
            started.set()
            for entry in monitor.listen():
                if stop.is_set():
                    return
                command = str(entry.get("command", ""))
                if needle in command:
                    seen.append(command)

    nodes = primaries(client)
    for node in nodes:
        started = threading.Event()
        ready.append(started)
        thread = threading.Thread(target=listen, args=(node, started), daemon=True)
        thread.start()
        threads.append(thread)
    for started in ready:
        assert started.wait(10), "MONITOR did not start"
    try:
        yield seen
    finally:
        stop.set()
        for node in nodes:
            node.echo(WAKE)
        for thread in threads:
            thread.join(10)


def script_calls(commands: list[str], script: str) -> list[str]:
    """The calls of the Lua function named ``script`` (its file in lua/ without the key count) in
    ``commands``: FCALL names carry the library's prefix, ``shardq_<hash>_<script>``."""
    name = "_" + script.replace("-", "_") + " "
    return [c for c in commands if c.upper().startswith("FCALL") and name in c + " "]


def by_name(commands: list[str]) -> Counter[str]:
    """``commands`` counted by name: a command's (``xpending``), or a Lua function's file name
    without the key count (``fetch``, ``prune-consumers``) for an FCALL."""
    counts: Counter[str] = Counter()
    for command in commands:
        words = command.split()
        if not words:
            continue
        name = words[0].lower()
        if name in ("fcall", "fcall_ro") and len(words) > 1:
            # shardq_<library hash>_<function>
            name = words[1].split("_", 2)[-1].replace("_", "-")
        counts[name] += 1
    return counts
