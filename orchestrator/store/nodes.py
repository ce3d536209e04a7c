"""Server nodes and the upkeep lease (README "Workers and nodes").

Every node keeps a row under its stable name (host:port unless named) and
moves `last_seen` on with each beat. A node that finds its own row not marked
"gone" when it starts was stopped without saying so: it counts that.

The lease is one row per name. Whoever holds an unexpired lease may renew it;
anyone may take an expired one. On PostgreSQL the database's clock decides, so
nodes with skewed clocks still agree; a SQLite database has one node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, true, update
from sqlalchemy.sql.elements import ColumnElement

from . import dialect
from .reads import StoreBase
from .rows import aware
from .schema import leases, nodes

STARTING, READY, DRAINING, GONE, LOST = "starting", "ready", "draining", "gone", "lost"
# Nodes gone this long are deleted by the leader.
KEEP_GONE = timedelta(days=1)


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    host: str
    pid: int
    listen: str
    version: str
    status: str
    started_at: datetime
    last_seen: datetime
    unexpected_shutdowns: int = 0
    last_unexpected_shutdown: datetime | None = None


@dataclass(frozen=True)
class Lease:
    holder: str
    expires_at: datetime


def _node(r: object) -> NodeRow:
    m = r._mapping  # type: ignore[attr-defined]
    last = m["last_unexpected_shutdown"]
    return NodeRow(
        node_id=m["node_id"],
        host=m["host"],
        pid=m["pid"],
        listen=m["listen"],
        version=m["version"],
        status=m["status"],
        started_at=aware(m["started_at"]),
        last_seen=aware(m["last_seen"]),
        unexpected_shutdowns=m["unexpected_shutdowns"],
        last_unexpected_shutdown=aware(last) if last is not None else None,
    )


def _naive(value: datetime) -> datetime:
    return value.replace(tzinfo=None)


class Nodes:
    def __init__(self, store: StoreBase) -> None:
        self._store = store

    async def arrive(self, node: NodeRow) -> NodeRow | None:
        """Write this node's row as starting. Returns the row it replaced when that
        row was not marked gone: the node's last run ended without a clean stop."""
        store = self._store

        async def attempt() -> NodeRow | None:
            async with store._write() as conn:
                query = select(nodes).where(nodes.c.node_id == node.node_id)
                found = (await conn.execute(dialect.for_update(query, store.is_pg))).first()
                before = _node(found) if found is not None else None
                unexpected = before is not None and before.status != GONE
                values = {
                    "node_id": node.node_id,
                    "host": node.host,
                    "pid": node.pid,
                    "listen": node.listen,
                    "version": node.version,
                    "status": node.status,
                    "started_at": _naive(node.started_at),
                    "last_seen": _naive(node.last_seen),
                    "unexpected_shutdowns": (before.unexpected_shutdowns if before else 0)
                    + (1 if unexpected else 0),
                    "last_unexpected_shutdown": _naive(node.started_at)
                    if unexpected
                    else (
                        _naive(before.last_unexpected_shutdown)
                        if before and before.last_unexpected_shutdown
                        else None
                    ),
                }
                await conn.execute(dialect.upsert(store.is_pg, nodes, values, ["node_id"]))
                return before if unexpected else None

        out: NodeRow | None = await store._retrying(attempt)
        return out

    async def beat(self, node_id: str, status: str, now: datetime) -> None:
        """This node is alive and in `status`."""
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(
                    update(nodes)
                    .where(nodes.c.node_id == node_id)
                    .values(status=status, last_seen=_naive(now))
                )

        await store._retrying(attempt)

    async def find(self, gone_since: datetime) -> list[NodeRow]:
        """Nodes not gone, and those gone since `gone_since`, by name."""
        c = nodes.c
        rows = await self._store._rows(
            select(nodes)
            .where((c.status != GONE) | (c.last_seen >= _naive(gone_since)))
            .order_by(c.node_id)
        )
        return [_node(r) for r in rows]

    async def prune(self, now: datetime) -> None:
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(
                    delete(nodes).where(
                        nodes.c.status == GONE, nodes.c.last_seen < _naive(now - KEEP_GONE)
                    )
                )

        await store._retrying(attempt)

    # -- the lease --------------------------------------------------------------------

    def _now(self, now: datetime) -> ColumnElement[datetime] | datetime:
        """The time leases are judged by: the database's on PostgreSQL."""
        return dialect.clock(self._store.is_pg, _naive(now))

    async def hold(
        self, name: str, holder: str, period: float, now: datetime, *, force: bool = False
    ) -> Lease | None:
        """Take or renew the lease for `period` seconds; the lease if `holder`
        has it now, else None. `force`: take it whoever holds it (SQLite's one
        node, whose earlier self may have held it under another name)."""
        store = self._store
        at = self._now(now)
        until = at + timedelta(seconds=period)

        async def attempt() -> Lease | None:
            async with store._write() as conn:
                c = leases.c
                free = true() if force else (c.holder == holder) | (c.expires_at < at)
                renewed = await conn.execute(
                    update(leases)
                    .where(c.name == name)
                    .where(free)
                    .values(holder=holder, expires_at=until)
                    .returning(c.holder, c.expires_at)
                )
                row = renewed.first()
                if row is None:
                    taken = (
                        await conn.execute(
                            dialect.insert_ignoring(store.is_pg, leases, ["name"])
                            .values(name=name, holder=holder, expires_at=until)
                            .returning(c.holder, c.expires_at)
                        )
                    ).first()
                    row = taken
                return Lease(row.holder, aware(row.expires_at)) if row is not None else None

        lease: Lease | None = await store._retrying(attempt)
        return lease

    async def release(self, name: str, holder: str) -> None:
        """Give the lease up now (a clean stop): another node takes it at its next try."""
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(
                    delete(leases).where(leases.c.name == name, leases.c.holder == holder)
                )

        await store._retrying(attempt)

    async def lease(self, name: str) -> Lease | None:
        row = await self._store._first(select(leases).where(leases.c.name == name))
        return Lease(row.holder, aware(row.expires_at)) if row is not None else None
