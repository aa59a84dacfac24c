"""Clients logged in as the shipped roles' ACL users (shardq.admin.acl.rules), on any Redis."""

from __future__ import annotations

import re
import uuid
from typing import Any

from shardq.admin import acl
from shardq.client import Client
from shardq.config import RedisSettings


def add_role_users(nodes: list[Any], roles: tuple[str, ...] = acl.ROLES) -> dict[str, str]:
    """An ACL user per role on every node (its password is its name); role -> user name."""
    suffix = uuid.uuid4().hex[:8]
    names = {role: f"t-{role}-{suffix}" for role in roles}
    for node in nodes:
        for role, name in names.items():
            rules = re.findall(r"\([^)]*\)|\S+", acl.rules(role))
            node.execute_command("ACL", "SETUSER", name, *rules, "on", f">{name}")
    return names


def role_client(url: str, name: str) -> Client:
    """A client of the user ``name`` made by :func:`add_role_users`."""
    return Client(RedisSettings.from_url(url, username=name, password=name))
