"""What a failed Redis call means: the one place redis-py's exceptions are classified.

Loops and producers ask here whether to follow a redirect, reload a script, retry after a pause
or give up, instead of matching on message text (redis-py's ``MovedError`` text is
``"<slot> <host:port>"``, with no ``MOVED`` prefix) or catching only ``RedisError`` (its
``RedisClusterException``, raised when no node answers, is not one).
"""

from __future__ import annotations

from redis import exceptions as rx

from shardq.errors import NotPermittedError, RedisFullError, RedisUnavailableError, ShardqError

# Faults that end on their own (a failover, a slot move, a restart, a network blip): retry the
# call after a pause and a fresh look at the slot map.
_TRANSIENT: tuple[type[BaseException], ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    rx.ClusterDownError,  # CLUSTERDOWN, and MasterDownError
    rx.TryAgainError,  # TRYAGAIN: a slot is moving key by key
    rx.ClusterError,  # "TTL exhausted": redirects kept coming during a migration
    rx.RedisClusterException,  # no node answered at all (not a RedisError)
    rx.BusyLoadingError,  # a restarted node loading its data
    rx.ReadOnlyError,  # wrote to a node that just became a replica
    OSError,
    TimeoutError,  # asyncio's timeout on a stalled read
)
# Faults that retrying cannot fix: wrong credentials or missing ACL permissions.
_PERMANENT: tuple[type[BaseException], ...] = (
    rx.AuthenticationError,
    rx.AuthorizationError,
    rx.NoPermissionError,
)


def is_redirect(exc: BaseException) -> bool:
    """MOVED or ASK: the slot lives elsewhere now; refresh the slot map and resend."""
    return isinstance(exc, rx.AskError)  # MovedError subclasses AskError


def is_migration(exc: BaseException) -> bool:
    """The normal signals of a slot on the move: MOVED or ASK, TRYAGAIN (a multi-key call while
    the slot's keys are split between two nodes), and redis-py's ``ClusterError`` "TTL
    exhausted" (redirects kept coming).  Matched on the types (redis-py's ``MovedError`` text
    is ``"<slot> <host:port>"``, no MOVED prefix); ``ClusterDownError`` is a ``ClusterError``
    too, but a shard down, not a move."""
    if isinstance(exc, rx.AskError | rx.TryAgainError):
        return True
    return isinstance(exc, rx.ClusterError) and not isinstance(exc, rx.ClusterDownError)


def redirect_fields(exc: BaseException) -> dict[str, object]:
    """What a move signal says, for its log event: the kind, and for MOVED/ASK the slot and the
    node that serves it now."""
    if isinstance(exc, rx.AskError):
        host, port = exc.node_addr
        kind = "moved" if isinstance(exc, rx.MovedError) else "ask"
        return {"redirect": kind, "slot": exc.slot_id, "node": f"{host}:{port}"}
    if isinstance(exc, rx.TryAgainError):
        return {"redirect": "tryagain"}
    return {"redirect": "ttl_exhausted", "error": str(exc)[:200]}


def is_code_missing(exc: BaseException) -> bool:
    """The node lacks shardq's functions (a new node, FUNCTION FLUSH): load them, resend."""
    return isinstance(exc, rx.NoScriptError) or (
        isinstance(exc, rx.ResponseError) and "Function not found" in str(exc)
    )


# A command a function ran that the caller's ACL user may not run (functions run with the
# caller's rights) comes back with an ERR code and a text that differs by server; a refused
# FCALL itself, or a key it declares, has the code NOPERM on every server.
_REFUSED_IN_FUNCTION = (
    # Redis 7.0: "The user executing the script can't run this command or subcommand",
    # "... can't access at least one of the keys mentioned in the command"
    "The user executing the script can't",
    # Redis 7.2 and later, Valkey: "ACL failure in script: User u has no permissions to run the
    # 'xack' command", "ACL failure in script: No permissions to access a key"
    "ACL failure in script",
)


def is_no_permission(exc: BaseException) -> bool:
    """The ACL user may not run this command (or touch this key), directly or inside a
    function, on any server shardq knows (by the NOPERM code, else by each server's text)."""
    if isinstance(exc, rx.NoPermissionError):
        return True
    if not isinstance(exc, rx.ResponseError):
        return False
    text = str(exc)
    return text.startswith("NOPERM") or any(t in text for t in _REFUSED_IN_FUNCTION)


def refused_by_acl(exc: BaseException, what: str) -> NotPermittedError:
    """The typed error for a call the server's ACL refused."""
    return NotPermittedError(
        f"this Redis user may not do {what}: the server refused it ({str(exc)[:200]}). Run it as "
        "the shardq role that may (docs/deploy.md, `shardq acl print`), or grant the user that "
        "role's rules"
    )


def is_oom(exc: BaseException) -> bool:
    """The node is at maxmemory with ``noeviction`` and refused a write: nothing was written."""
    return isinstance(exc, rx.OutOfMemoryError) or (
        isinstance(exc, rx.ResponseError) and str(exc).startswith("OOM ")
    )


def is_transient(exc: BaseException) -> bool:
    """A fault that ends on its own: retry after a pause (and a fresh slot map)."""
    # A typed shardq error is an answer, not a fault (NotPermittedError is a PermissionError,
    # hence an OSError: it would otherwise be resent until the retry window closed).
    if isinstance(exc, (*_PERMANENT, ShardqError)):
        return False
    return isinstance(exc, _TRANSIENT) or is_redirect(exc)


def is_unreachable(exc: BaseException) -> bool:
    """The node did not answer (refused, reset, timed out): not a redirect or a refusal."""
    if isinstance(exc, ShardqError):
        return False
    return isinstance(exc, rx.ConnectionError | rx.TimeoutError | TimeoutError | OSError)


def surely_not_written(exc: BaseException) -> bool:
    """Whether a failed call certainly had no effect (the node refused it before running it).

    A connection reset or timeout after the command was sent leaves it unknown.
    """
    return (
        is_redirect(exc)
        or is_code_missing(exc)
        or is_oom(exc)
        or isinstance(
            exc,
            rx.ClusterDownError
            | rx.TryAgainError
            | rx.BusyLoadingError
            | rx.ReadOnlyError
            | ConnectionRefusedError,
        )
        or (isinstance(exc, rx.ConnectionError) and "refused" in str(exc).lower())
    )


def translate(exc: BaseException, what: str = "the call") -> BaseException:
    """The typed shardq error for a Redis fault a caller should see, or ``exc`` itself."""
    if is_no_permission(exc):
        return refused_by_acl(exc, what)
    if is_oom(exc):
        return RedisFullError(
            f"Redis is full (maxmemory reached, policy noeviction): {what} wrote nothing. Free "
            "memory (drain or purge queues, delete other data) or raise maxmemory, then retry."
        )
    if is_transient(exc):
        written = False if surely_not_written(exc) else None
        return RedisUnavailableError(
            f"Redis did not answer {what} ({type(exc).__name__}: {exc}); "
            + (
                "nothing was written: retry."
                if written is False
                else "it may or may not have been written: retry only if it is safe to repeat."
            ),
            written,
        )
    return exc
