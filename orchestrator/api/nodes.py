"""`ListNodes` on AdminService: the server nodes sharing the database and the
upkeep leader (README "Workers and nodes")."""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.store import nodes as node_rows
from orchestrator.store.nodes import NodeRow
from orchestrator.store.rows import utcnow
from orchestrator.upkeep.leader import UPKEEP_LEASE, node_of
from sdk.api.weft.v1 import admin_pb2 as a

from . import validate
from .common import Ctx, ServiceBase, timestamp
from .errors import grpc_errors

LISTED_GONE_WITHIN = timedelta(hours=1)
# A node that has not beaten for this many lease periods is shown lost.
LOST_AFTER_PERIODS = 3


def node_status(node: NodeRow, now: datetime, lease_period: float) -> str:
    """The row's status, or "lost" for a node silent too long to be alive."""
    silent = now - node.last_seen > timedelta(seconds=LOST_AFTER_PERIODS * lease_period)
    return node_rows.LOST if node.status != node_rows.GONE and silent else node.status


class NodesAdmin(ServiceBase):
    @grpc_errors
    async def ListNodes(self, req: a.ListNodesRequest, ctx: Ctx) -> a.ListNodesResponse:
        within = LISTED_GONE_WITHIN
        if req.HasField("gone_within"):
            within = timedelta(seconds=validate.seconds("gone_within", req.gone_within))
        now = utcnow()
        lease = await self._store.nodes.lease(UPKEEP_LEASE)
        leader = node_of(lease.holder) if lease is not None and lease.expires_at > now else ""
        resp = a.ListNodesResponse(leader=leader)
        if lease is not None and leader:
            resp.lease_expire_time.CopyFrom(timestamp(lease.expires_at))
        for node in await self._store.nodes.find(now - within):
            info = resp.nodes.add(
                node_id=node.node_id,
                host=node.host,
                pid=node.pid,
                listen=node.listen,
                status=node_status(node, now, self._settings.lease_period),
                started_time=timestamp(node.started_at),
                last_seen_time=timestamp(node.last_seen),
                leader=node.node_id == leader,
                unexpected_shutdowns=node.unexpected_shutdowns,
                version=node.version,
            )
            if node.last_unexpected_shutdown is not None:
                info.last_unexpected_shutdown_time.CopyFrom(
                    timestamp(node.last_unexpected_shutdown)
                )
        return resp
