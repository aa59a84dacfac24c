"""``shardq acl print`` and ``shardq functions load|status``: the Redis users and the functions
library a deployment needs (see docs/deploy.md)."""

from __future__ import annotations

import click

from shardq import format as fmt
from shardq.cli.connection import redis_options, redis_settings
from shardq.cli.params import QUEUE_NAME
from shardq.names import ROLES


@click.group("acl")
def acl_group() -> None:
    """Redis ACL users per role."""


@acl_group.command("print")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default=None,
    help="One role's rules (after `user <name>`); all roles as an ACL file by default.",
)
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    type=QUEUE_NAME,
    help="Confine the users to these queues (repeat); every queue by default.",
)
def acl_print(role: str | None, queues: tuple[str, ...]) -> None:
    """Print least-privilege ACL rules: one role's, or every role's as an ACL file."""
    from shardq.admin import acl

    qs = list(queues) or ["*"]
    click.echo(acl.rules(role, qs) if role else acl.acl_file(qs), nl=role is not None)


@click.group("functions")
def functions_group() -> None:
    """shardq's Redis Functions library (loaded once per primary; roles only call it)."""


@functions_group.command("load")
@redis_options
def functions_load() -> None:
    """Load this version's library on every primary (as an admin user; safe to repeat)."""
    from shardq.connection import connect
    from shardq.store import functions

    client = connect(redis_settings())
    try:
        for node, state in functions.load_everywhere(client).items():
            click.echo(f"{node}: {state}")
    finally:
        client.close()


@functions_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: node -> loaded.")
@redis_options
def functions_status(as_json: bool) -> None:
    """Whether this version's library is loaded on every primary (exit 1 if not)."""
    from shardq.connection import connect
    from shardq.store import functions

    client = connect(redis_settings())
    try:
        states = functions.status(client)
    finally:
        client.close()
    if as_json:
        fmt.echo_json({"library": functions.name(), "nodes": states})
    else:
        for node, loaded in states.items():
            click.echo(f"{node}: {'loaded' if loaded else 'MISSING'} ({functions.name()})")
    if not all(states.values()):
        raise click.ClickException("run `shardq functions load` as an admin user")
