"""The upkeep lease: one node at a time leads the work that must not run twice
at once (the retention purge, schedules, the worker-session reaper).

The leader renews its lease every third of a period. It stops believing it
leads a tenth of a period before its lease can have ended, counted from before
it asked, so two nodes never both believe it while their clocks run at the
same rate. A node whose leader died takes the expired lease at its next try:
within a period and a third of the death. On SQLite there is one node: it
always leads.
"""

from __future__ import annotations

import time
import uuid

import structlog

from orchestrator.store.rows import utcnow
from orchestrator.store.store import Store

log = structlog.get_logger("weft.leader")

UPKEEP_LEASE = "upkeep"
_TRUSTED = 0.9  # of a period: how long a renewal is believed


def node_of(holder: str) -> str:
    """The node name of a lease holder (`NAME/PROCESS`)."""
    return holder.rpartition("/")[0] or holder


class Leadership:
    def __init__(self, store: Store, node_id: str, period: float) -> None:
        self._store = store
        self.node_id = node_id
        # The holder is this process, not only its name: two processes given the
        # same --node-name (one config for every replica) must not both lead.
        self.holder = f"{node_id}/{uuid.uuid4().hex[:12]}"
        self.period = period
        self._until = 0.0  # monotonic

    def leads(self) -> bool:
        return time.monotonic() < self._until

    async def renew(self) -> bool:
        """Take or renew the lease; whether this node leads now."""
        asked = time.monotonic()
        lease = await self._store.nodes.hold(
            UPKEEP_LEASE, self.holder, self.period, utcnow(), force=not self._store.is_pg
        )
        was = self.leads()
        if lease is not None and lease.holder == self.holder:
            self._until = asked + _TRUSTED * self.period
            if not was:
                log.info("leader.elected", node=self.node_id, lease_period=self.period)
            return True
        self._until = 0.0
        if was:
            log.warning("leader.lost_lease", node=self.node_id)
        return False

    def forget(self) -> None:
        """The lease could not be renewed (the database is away): stop leading now."""
        if self.leads():
            log.warning("leader.stepped_down", node=self.node_id, why="lease not renewed")
        self._until = 0.0

    async def release(self) -> None:
        """A clean stop: hand the lease back so another node leads at its next try."""
        if self.leads():
            self._until = 0.0
            await self._store.nodes.release(UPKEEP_LEASE, self.holder)
            log.info("leader.released", node=self.node_id)
