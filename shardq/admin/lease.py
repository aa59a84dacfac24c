"""The leader lease of the admin tools that must act one at a time: the resize driver (one per
queue, ``{sq:<queue>}:resize:lease``) and the balancer (one per cluster, ``{sq:balancer}:lease``).

It is the dispatchers' lease (lease-acquire, lease-renew, lease-release): each grant takes a
fencing token that only grows, so a holder paused past its lease, which another process then
took, is refused at its next renewal and knows it no longer leads.  It renews at a third of the
lease time, as the dispatchers do: a renewal sooner would be a wasted call, and two more chances
remain before the lease could expire.
"""

from __future__ import annotations

import contextlib
import time

from shardq.client import Client
from shardq.errors import ShardqError
from shardq.plans import one
from shardq.store import fleet
from shardq.store.keys import LeaseKeys

__all__ = ["LeaderLease"]


class LeaderLease:
    """One process's hold on a lease, run through ``client`` (retries and typed errors as for
    any facade call).  ``name`` says which in error messages ("the resize lease")."""

    def __init__(
        self, client: Client, keys: LeaseKeys, owner: str, lease_ms: int, name: str
    ) -> None:
        self.client = client
        self.keys = keys
        self.owner = owner
        self.lease_ms = lease_ms
        self.name = name
        #: The fencing token of the lease held ("" when not held).
        self.token = ""
        #: When it was last granted or renewed (``time.monotonic``).
        self.renewed = 0.0

    def acquire(self) -> fleet.Grant:
        """Take the lease, or extend it when this owner holds it; the grant says whether it
        was ``won`` (``new`` when not an extension) or which ``owner`` holds it."""
        grant = self.client.run(
            one(fleet.lease_acquire(self.keys, self.owner, self.lease_ms)), f"taking {self.name}"
        )
        self.token = grant.token if grant.won else ""
        if grant.won:
            self.renewed = time.monotonic()
        return grant

    def renew(self) -> bool:
        """Renew the lease once a third of it has passed since the last grant or renewal; False
        (and the token dropped) when it is not held, or the token is stale: another process
        took it."""
        if not self.token:
            return False
        if time.monotonic() - self.renewed < self.lease_ms / 3000:
            return True
        kept = self.client.run(
            one(fleet.lease_renew(self.keys, self.token, self.lease_ms)), f"renewing {self.name}"
        )
        if not kept:
            self.token = ""
            return False
        self.renewed = time.monotonic()
        return True

    def release(self) -> None:
        """Give the lease back (a clean stop), so another process takes it at once; if Redis
        does not answer, it expires by itself."""
        if self.token:
            with contextlib.suppress(ShardqError):
                self.client.run(
                    one(fleet.lease_release(self.keys, self.token)), "releasing the lease"
                )
            self.token = ""
