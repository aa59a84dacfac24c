"""What every consumer in the comparison does per job: append one line to its run log.

Each line is ``<job id> <lateness ms>\\n``, written with one ``os.write`` on an O_APPEND file
descriptor, so a line is in the kernel's page cache the moment the handler returns: a consumer
killed with SIGKILL keeps every run it made.  The harness counts lines per job id to find lost
jobs (no line) and duplicates (more than one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


class RunLog:
    def __init__(self, path: str | Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(self, job_id: str, lateness_ms: float) -> None:
        os.write(self.fd, f"{job_id} {max(0.0, lateness_ms):.3f}\n".encode())


def ready() -> None:
    """Tell the harness the consumer is listening (it waits for this line on stdout)."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
