"""weft.v1.AdminService: what operators do to the service rather than to one
workflow: locks (list, force-release), namespaces and the retention purge;
credentials, nodes, schedules and the diagnosis of stuck runs in their own
modules."""

from __future__ import annotations

import uuid

import structlog

from orchestrator.engine import locks as lock_rules
from orchestrator.engine import replay, retention
from orchestrator.engine.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from orchestrator.store.rows import LockEntry, utcnow
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag

from . import validate
from .common import Ctx, optional_payload, timestamp
from .credentials import CredentialsAdmin
from .doctor import DiagnosticsAdmin
from .errors import grpc_errors
from .nodes import NodesAdmin
from .schedules import SchedulesAdmin

log = structlog.get_logger("weft.api")


def _holder(entry: LockEntry) -> a.LockHolder:
    return a.LockHolder(
        workflow_id=entry.workflow_id,
        run_id=entry.run_id,
        requested_event_id=entry.requested_id,
        since=timestamp(entry.since.timestamp()),
    )


class AdminService(
    CredentialsAdmin, NodesAdmin, DiagnosticsAdmin, SchedulesAdmin, ag.AdminServiceServicer
):
    @grpc_errors
    async def ListLocks(self, req: a.ListLocksRequest, ctx: Ctx) -> a.ListLocksResponse:
        ns = validate.namespace(req.namespace)
        if req.lock_name:
            validate.name("lock_name", req.lock_name, lock_rules.MAX_LOCK_NAME)
        resp = a.ListLocksResponse()
        for view in await self._store.list_locks(ns, req.lock_name):
            info = resp.locks.add(lock_name=view.lock_name)
            if view.holder is not None:
                info.holder.CopyFrom(_holder(view.holder))
            info.waiters.extend(_holder(w) for w in view.waiters)
        return resp

    @grpc_errors
    async def ForceReleaseLock(
        self, req: a.ForceReleaseLockRequest, ctx: Ctx
    ) -> a.ForceReleaseLockResponse:
        ns = validate.namespace(req.namespace)
        name = validate.name("lock_name", req.lock_name, lock_rules.MAX_LOCK_NAME)
        for _ in range(3):
            views = await self._store.list_locks(ns, name)
            holder = views[0].holder if views else None
            if holder is None:
                raise NotFound(f"lock {name!r} has no holder in namespace {ns!r}")
            try:
                await self._store.transact(
                    holder.run_id,
                    lambda t: lock_rules.force_release(t, name, req.identity, req.reason),
                )
            except FailedPrecondition:
                continue  # it changed hands (or its run closed) since we looked: look again
            break
        else:
            raise FailedPrecondition(f"lock {name!r} keeps changing hands; try again")
        log.info(
            "lock.force_released",
            namespace=ns,
            lock=name,
            workflow_id=holder.workflow_id,
            identity=req.identity,
        )
        resp = a.ForceReleaseLockResponse(
            released_workflow_id=holder.workflow_id, released_run_id=holder.run_id
        )
        after = await self._store.list_locks(ns, name)
        if after and after[0].holder is not None:
            resp.granted_workflow_id = after[0].holder.workflow_id
            resp.granted_run_id = after[0].holder.run_id
        return resp

    @grpc_errors
    async def RegisterNamespace(
        self, req: a.RegisterNamespaceRequest, ctx: Ctx
    ) -> a.RegisterNamespaceResponse:
        name = validate.namespace(req.name)
        if req.retention:
            policy = retention.parse(req.retention).policy
            if _refers(policy):
                raise InvalidArgument(
                    "retention: a namespace default cannot be context, parent or system"
                )
        await self._store.register_namespace(name, req.retention, req.description)
        return a.RegisterNamespaceResponse()

    @grpc_errors
    async def DescribeNamespace(
        self, req: a.DescribeNamespaceRequest, ctx: Ctx
    ) -> a.DescribeNamespaceResponse:
        name = validate.namespace(req.name)
        row = await self._store.namespace(name)
        if row is None:
            return a.DescribeNamespaceResponse(name=name, retention=retention.SYSTEM_DEFAULT)
        return a.DescribeNamespaceResponse(
            name=name,
            retention=row["retention"],
            description=row["description"],
            registered=True,
        )

    @grpc_errors
    async def ReplayWorkflow(
        self, req: a.ReplayWorkflowRequest, ctx: Ctx
    ) -> a.ReplayWorkflowResponse:
        ns = validate.namespace(req.namespace)
        validate.workflow_id(
            "execution.workflow_id", req.execution.workflow_id, self._settings.limits
        )
        request = replay.ReplayRequest(
            mode=req.mode,
            step=req.step,
            force=req.force,
            identity=req.identity,
            reason=req.reason,
            point=optional_payload(req, "point"),
        )
        request.check()
        if request.point is None:
            raise InvalidArgument(
                "point is required: the replay point resolved from the run's history"
                " (workers.steps.replay.resolve; `weft replay` does it)"
            )
        replay.check_point(request.point)
        row = await self._store.find_run(ns, req.execution.workflow_id, req.execution.run_id)
        replay.check_replayable(row.status)
        start = await self._store.read_history(row.key.run_id, 1, 1, 1)
        if not start:  # purged by retention since it was found
            raise NotFound(f"workflow {row.key.workflow_id!r} has no such run any more")
        first = start[0]
        replay.check_step_workflow(row.key.workflow_id, first.workflow_started)
        if row.status == "open":
            await self._store.transact(row.key.run_id, lambda t: replay.replay_in_place(t, request))
            new_run, run_id = False, row.key.run_id
        else:
            run_id, new_run = str(uuid.uuid4()), True
            await self._store.replay_closed(
                row,
                run_id,
                lambda t: replay.replay_as_new_run(
                    t, first.workflow_started, row.key.run_id, request
                ),
            )
        log.info(
            "workflow.replay",
            namespace=ns,
            workflow_id=row.key.workflow_id,
            run_id=run_id,
            mode=req.mode,
            new_run=new_run,
        )
        return a.ReplayWorkflowResponse(run_id=run_id, new_run=new_run)

    @grpc_errors
    async def PurgeClosedRuns(
        self, req: a.PurgeClosedRunsRequest, ctx: Ctx
    ) -> a.PurgeClosedRunsResponse:
        purged = await self._store.purge_closed(utcnow())
        return a.PurgeClosedRunsResponse(purged=purged or 0, ran=purged is not None)


def _refers(policy: retention.Policy) -> bool:
    if isinstance(policy, retention.Ref):
        return True
    if isinstance(policy, retention.Combine):
        return any(_refers(p) for p in policy.parts)
    return False
