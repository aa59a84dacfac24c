"""Process identity: who a worker or dispatcher is in its fleet, across restarts.

A member id is ``<role>:<instance>#<incarnation>``.  The instance names the place a process runs
and survives a restart in place: ``SHARDQ_INSTANCE`` (set it to the pod name in Kubernetes) or
else ``<hostname>:<pid>``, which is also stable for a container restarted in its pod (the same
hostname, pid 1).  The incarnation is random per start.  A process that finds members of its own
instance with another incarnation knows they are its dead predecessors: it takes over their
leases and deliveries at once instead of waiting for their heartbeats to expire.
"""

from __future__ import annotations

import os
import secrets
import socket

from shardq.errors import ConfigError
from shardq.names import MAX_MEMBER_BYTES


def instance_name(explicit: str | None = None) -> str:
    """The instance this process runs as (see the module docstring)."""
    name = explicit or os.environ.get("SHARDQ_INSTANCE") or ""
    return name.strip() or f"{socket.gethostname()}:{os.getpid()}"


def member_id(role: str, instance: str | None = None) -> str:
    """A fresh member id for a process of ``role`` (``worker`` or ``dispatcher``);
    ConfigError for an instance name too long for the scripts that keep the id."""
    member = f"{role}:{instance_name(instance)}#{secrets.token_hex(3)}"
    if len(member.encode(errors="replace")) > MAX_MEMBER_BYTES:
        raise ConfigError(
            f"the instance name makes a member id of {len(member.encode(errors='replace'))} "
            f"bytes, over {MAX_MEMBER_BYTES}: set a shorter SHARDQ_INSTANCE"
        )
    return member


def instance_of(member: str) -> str:
    """The ``<role>:<instance>`` part of a member id (the id itself if it has no incarnation)."""
    head, sep, _ = member.rpartition("#")
    return head if sep else member


def predecessors(me: str, members: list[str]) -> list[str]:
    """Members of the same instance as ``me`` with another incarnation: restarted in place, so
    the old incarnation is gone."""
    mine = instance_of(me)
    return [m for m in members if m != me and instance_of(m) == mine and "#" in m]
