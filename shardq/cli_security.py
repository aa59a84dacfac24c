"""``shardq acl print`` and ``shardq functions load|status``: the Redis users and the functions
library a deployment needs (see docs/deploy.md)."""

from __future__ import annotations

import click

from shardq import acl
from shardq.cli_common import friendly_errors, redis_options, settings_from
from shardq.connection import connect
from shardq.store import functions


@click.group("acl")
def acl_group() -> None:
    """Redis ACL users per role."""


@acl_group.command("print")
@click.option(
    "--role",
    type=click.Choice(acl.ROLES),
    default=None,
    help="One role's rules (after `user <name>`); all roles as an ACL file by default.",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    help="Confine the users to these queues (repeat); every queue by default.",
)
def acl_print(role: str | None, queues: tuple[str, ...]) -> None:
    """Print least-privilege ACL rules: one role's, or every role's as an ACL file."""
    for q in queues:
        from shardq.jobs import check_queue_name

        check_queue_name(q)
    qs = list(queues) or ["*"]
    click.echo(acl.rules(role, qs) if role else acl.acl_file(qs), nl=role is not None)


@click.group("functions")
def functions_group() -> None:
    """shardq's Redis Functions library (loaded once per primary; roles only call it)."""


@functions_group.command("load")
@redis_options
@friendly_errors
def functions_load(url: str, username: str | None, password: str | None) -> None:
    """Load this version's library on every primary (as an admin user; safe to repeat)."""
    client = connect(settings_from(url, username, password))
    try:
        for node, state in functions.load_everywhere(client).items():
            click.echo(f"{node}: {state}")
    finally:
        client.close()


@functions_group.command("status")
@redis_options
@friendly_errors
def functions_status(url: str, username: str | None, password: str | None) -> None:
    """Whether this version's library is loaded on every primary (exit 1 if not)."""
    client = connect(settings_from(url, username, password))
    try:
        states = functions.status(client)
    finally:
        client.close()
    for node, loaded in states.items():
        click.echo(f"{node}: {'loaded' if loaded else 'MISSING'} ({functions.name()})")
    if not all(states.values()):
        raise click.ClickException("run `shardq functions load` as an admin user")
