"""Worker sessions on WorkflowService (README "Workers and nodes"): a worker
registers, heartbeats and unregisters; `weft workers` lists them.

The reaper that acts on an expired session runs on the leader
(`orchestrator.upkeep.reaper`); here a session only comes and goes.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from orchestrator.engine import caller
from orchestrator.engine.derived import ACTIVITY, DECISION
from orchestrator.engine.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from orchestrator.engine.transition import duration
from orchestrator.store.rows import utcnow
from orchestrator.store.workers import LIVE, STOPPED, WorkerSession
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s

from . import validate
from .common import Ctx, ServiceBase, timestamp
from .errors import grpc_errors
from .guard import check_run

MIN_SESSION_TIMEOUT = 2.0
MAX_SESSION_TIMEOUT = 600.0
# Heartbeats come this many times per timeout: two may be lost in a row.
BEATS_PER_TIMEOUT = 3
MAX_TASK_LISTS = 100
LISTED_ENDED_WITHIN = timedelta(hours=1)
_KINDS = {c.TASK_LIST_KIND_DECISION: DECISION, c.TASK_LIST_KIND_ACTIVITY: ACTIVITY}
_KIND_ENUMS = {v: k for k, v in _KINDS.items()}


def _info(session: WorkerSession) -> s.WorkerInfo:
    info = s.WorkerInfo(
        worker_session_id=session.session_id,
        identity=session.identity,
        host=session.host,
        pid=session.pid,
        build_id=session.build_id,
        status=session.status,
        registered_time=timestamp(session.registered_at),
        last_heartbeat_time=timestamp(session.last_seen),
        principal=session.principal,
    )
    info.task_lists.extend(
        s.WorkerTaskList(name=name, kind=_KIND_ENUMS[kind]) for kind, name in session.task_lists
    )
    if session.ended_at is not None:
        info.end_time.CopyFrom(timestamp(session.ended_at))
    return info


def _visible(namespace: str, session: WorkerSession) -> bool:
    try:
        for _, name in session.task_lists:
            check_run("ListWorkers", namespace, task_list=name)
    except PermissionDenied:
        return False
    return True


class WorkerSessionsApi(ServiceBase):
    @grpc_errors
    async def RegisterWorker(
        self, req: s.RegisterWorkerRequest, ctx: Ctx
    ) -> s.RegisterWorkerResponse:
        ns = validate.namespace(req.namespace)
        validate.name("identity", req.identity)
        validate.optional_name("host", req.host)
        validate.optional_name("build_id", req.build_id)
        if req.pid < 0:
            raise InvalidArgument("pid must not be negative")
        if not req.task_lists:
            raise InvalidArgument("a worker polls at least one task list")
        if len(req.task_lists) > MAX_TASK_LISTS:
            raise InvalidArgument(f"a worker polls at most {MAX_TASK_LISTS} task lists")
        pairs: list[tuple[str, str]] = []
        for tl in req.task_lists:
            kind = _KINDS.get(tl.kind)
            if kind is None:
                raise InvalidArgument("each task list needs its kind: decision or activity")
            validate.name("task_lists.name", tl.name)
            # A worker narrowed to task lists registers on those lists only.
            check_run("RegisterWorker", ns, task_list=tl.name)
            if (kind, tl.name) not in pairs:
                pairs.append((kind, tl.name))
        timeout = self._settings.session_timeout
        if req.HasField("session_timeout"):
            timeout = validate.seconds("session_timeout", req.session_timeout, positive=True)
            if not MIN_SESSION_TIMEOUT <= timeout <= MAX_SESSION_TIMEOUT:
                raise InvalidArgument(
                    f"session_timeout must be between {MIN_SESSION_TIMEOUT:g} s"
                    f" and {MAX_SESSION_TIMEOUT:g} s"
                )
        now = utcnow()
        session = WorkerSession(
            session_id=uuid.uuid4().hex,
            namespace=ns,
            identity=req.identity,
            host=req.host,
            pid=req.pid,
            task_lists=tuple(pairs),
            build_id=req.build_id,
            principal=caller.principal.get(),
            timeout=timeout,
            status=LIVE,
            registered_at=now,
            last_seen=now,
            expires_at=now + timedelta(seconds=timeout),
        )
        await self._store.workers.register(session)
        return s.RegisterWorkerResponse(
            worker_session_id=session.session_id,
            heartbeat_interval=duration(timeout / BEATS_PER_TIMEOUT),
            session_timeout=duration(timeout),
        )

    @grpc_errors
    async def RecordWorkerHeartbeat(
        self, req: s.RecordWorkerHeartbeatRequest, ctx: Ctx
    ) -> s.RecordWorkerHeartbeatResponse:
        session = await self._own_session(req, "RecordWorkerHeartbeat")
        if session is None:
            raise NotFound(
                f"no worker session {req.worker_session_id!r} in this namespace: register"
            )
        try:
            await self._store.workers.heartbeat(session, utcnow())
        except FailedPrecondition:
            self.sessions.ended(session.session_id)  # its polls here are refused from now on
            raise
        return s.RecordWorkerHeartbeatResponse()

    async def _own_session(self, req: Any, rpc: str) -> WorkerSession | None:
        """The session a heartbeat or a goodbye names, if it is of this namespace;
        PERMISSION_DENIED unless the caller's grant covers each of its task lists
        (as it would to register it): a worker cannot end another team's session."""
        ns = validate.namespace(req.namespace)
        session_id = validate.name("worker_session_id", req.worker_session_id)
        session = await self._store.workers.get(session_id)
        if session is None or session.namespace != ns:
            return None
        for _, name in session.task_lists:
            check_run(rpc, ns, task_list=name)
        return session

    @grpc_errors
    async def UnregisterWorker(
        self, req: s.UnregisterWorkerRequest, ctx: Ctx
    ) -> s.UnregisterWorkerResponse:
        session = await self._own_session(req, "UnregisterWorker")
        if session is None:
            return s.UnregisterWorkerResponse()  # (gone already: nothing to do)
        # What it still had started (abandoned past its grace) is reaped at once.
        await self._store.workers.end(session.session_id, STOPPED, utcnow(), only_expired=False)
        self.sessions.ended(session.session_id)
        return s.UnregisterWorkerResponse()

    @grpc_errors
    async def ListWorkers(self, req: s.ListWorkersRequest, ctx: Ctx) -> s.ListWorkersResponse:
        ns = validate.namespace(req.namespace)
        validate.optional_name("task_list", req.task_list)
        within = LISTED_ENDED_WITHIN
        if req.HasField("ended_within"):
            within = timedelta(seconds=validate.seconds("ended_within", req.ended_within))
        found = await self._store.workers.find(ns, req.task_list, utcnow() - within)
        # A worker narrowed to task lists sees the sessions of those lists only.
        return s.ListWorkersResponse(workers=[_info(w) for w in found if _visible(ns, w)])
