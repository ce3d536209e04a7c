"""The AsyncClient's calls about the cluster itself (README "Workers and
nodes"): the workers polling a namespace, and the server nodes with their
upkeep leader."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.durations import duration

_KIND_NAMES = {c.TASK_LIST_KIND_DECISION: "decision", c.TASK_LIST_KIND_ACTIVITY: "activity"}


def _time(stamp: Timestamp) -> datetime | None:
    return stamp.ToDatetime(tzinfo=UTC) if stamp.seconds or stamp.nanos else None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True)
class WorkerInfo:
    """One worker session: "live", "stopped" (it unregistered) or "lost"."""

    worker_session_id: str
    identity: str
    host: str
    pid: int
    task_lists: list[tuple[str, str]]
    """(kind, name): kind "decision" or "activity"."""
    build_id: str
    status: str
    registered: datetime | None
    last_heartbeat: datetime | None
    ended: datetime | None
    principal: str

    @classmethod
    def of(cls, w: s.WorkerInfo) -> WorkerInfo:
        return cls(
            worker_session_id=w.worker_session_id,
            identity=w.identity,
            host=w.host,
            pid=w.pid,
            task_lists=[(_KIND_NAMES.get(t.kind, "?"), t.name) for t in w.task_lists],
            build_id=w.build_id,
            status=w.status,
            registered=_time(w.registered_time),
            last_heartbeat=_time(w.last_heartbeat_time),
            ended=_time(w.end_time),
            principal=w.principal,
        )

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["task_lists"] = [{"kind": k, "name": n} for k, n in self.task_lists]
        for name in ("registered", "last_heartbeat", "ended"):
            doc[name] = _iso(getattr(self, name))
        return doc


@dataclass(frozen=True)
class NodeInfo:
    """One server node: "starting", "ready", "draining", "gone" or "lost"."""

    node_id: str
    host: str
    pid: int
    listen: str
    status: str
    started: datetime | None
    last_seen: datetime | None
    leader: bool
    unexpected_shutdowns: int
    last_unexpected_shutdown: datetime | None
    version: str

    @classmethod
    def of(cls, n: a.NodeInfo) -> NodeInfo:
        return cls(
            node_id=n.node_id,
            host=n.host,
            pid=n.pid,
            listen=n.listen,
            status=n.status,
            started=_time(n.started_time),
            last_seen=_time(n.last_seen_time),
            leader=n.leader,
            unexpected_shutdowns=n.unexpected_shutdowns,
            last_unexpected_shutdown=_time(n.last_unexpected_shutdown_time),
            version=n.version,
        )

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for name in ("started", "last_seen", "last_unexpected_shutdown"):
            doc[name] = _iso(getattr(self, name))
        return doc


@dataclass(frozen=True)
class Nodes:
    nodes: list[NodeInfo]
    leader: str
    """The node id of the upkeep leader ("" while none holds the lease)."""
    lease_expires: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader,
            "lease_expires": _iso(self.lease_expires),
            "nodes": [n.to_json() for n in self.nodes],
        }


class ClusterCalls:
    """Mixed into `AsyncClient`, which provides `namespace` and `rpc`."""

    namespace: str

    async def rpc(self, method: str, request: Message, *, timeout: timedelta | None = None) -> Any:
        raise NotImplementedError

    async def list_workers(
        self, *, task_list: str = "", ended_within: timedelta | None = None
    ) -> list[WorkerInfo]:
        """The namespace's live workers, then those that stopped or were lost
        within `ended_within` (default: an hour), newest first."""
        resp = await self.rpc(
            "ListWorkers",
            s.ListWorkersRequest(
                namespace=self.namespace, task_list=task_list, ended_within=duration(ended_within)
            ),
        )
        return [WorkerInfo.of(w) for w in resp.workers]

    async def list_nodes(self, *, gone_within: timedelta | None = None) -> Nodes:
        """The server nodes sharing the database (and those gone within
        `gone_within`, default an hour), and which one leads the upkeep."""
        resp = await self.rpc("ListNodes", a.ListNodesRequest(gone_within=duration(gone_within)))
        return Nodes(
            nodes=[NodeInfo.of(n) for n in resp.nodes],
            leader=resp.leader,
            lease_expires=_time(resp.lease_expire_time),
        )
