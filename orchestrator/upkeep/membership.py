"""This node's row in `nodes`: written as starting, beaten while it serves,
marked draining, then gone on a clean stop. Finding the row of its own name
not gone at start means the last run of this node ended without a clean stop
(kill -9, a crash, a lost machine): it is logged and counted."""

from __future__ import annotations

import os
import socket

import structlog

from orchestrator.store import nodes as node_rows
from orchestrator.store.nodes import NodeRow
from orchestrator.store.rows import utcnow
from orchestrator.store.store import Store

log = structlog.get_logger("weft.nodes")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("weft")
    except PackageNotFoundError:
        return "dev"


def default_node_name(listen: str, port: int = 0) -> str:
    """HOST:PORT, the port as bound when the listener asked for any."""
    configured = listen.rpartition(":")[2]
    return f"{socket.gethostname()}:{port or configured}"


class Membership:
    def __init__(self, store: Store, node_id: str, listen: str) -> None:
        self._store = store
        self.node_id = node_id
        self._listen = listen
        self.status = node_rows.STARTING

    async def arrive(self) -> None:
        now = utcnow()
        before = await self._store.nodes.arrive(
            NodeRow(
                node_id=self.node_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                listen=self._listen,
                version=version(),
                status=node_rows.STARTING,
                started_at=now,
                last_seen=now,
            )
        )
        if before is not None:
            log.warning(
                "node.unexpected_shutdown",
                node=self.node_id,
                previous_pid=before.pid,
                previous_status=before.status,
                last_seen=before.last_seen.isoformat(),
                times=before.unexpected_shutdowns + 1,
            )

    async def become(self, status: str) -> None:
        self.status = status
        await self.beat()

    async def beat(self) -> None:
        await self._store.nodes.beat(self.node_id, self.status, utcnow())
