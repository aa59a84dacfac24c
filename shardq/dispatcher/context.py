"""The dispatcher's context: what every dispatcher component is built on.

:class:`~shardq.dispatcher.dispatcher.Dispatcher` builds it once the queue is known (the shared
start-up in :mod:`shardq.runtime.process`) and hands it to each component, with the components
it uses as keyword-only arguments: ``Leases(ctx)``, ``Promoter(ctx, leases=...)`` and so on.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardq.config import DispatcherSettings
from shardq.runtime.membership import Membership
from shardq.runtime.process import RoleContext


@dataclass(frozen=True, kw_only=True, eq=False)
class DispatcherContext(RoleContext[DispatcherSettings]):
    """:class:`~shardq.runtime.process.RoleContext` of a dispatcher: it is always in a fleet."""

    membership: Membership

    @property
    def owner(self) -> str:
        """The owner this dispatcher's leases name (its member id)."""
        return self.member
