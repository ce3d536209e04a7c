"""A worker's session with the service (README "Workers and nodes").

The worker registers (identity, host, pid, task lists, build), heartbeats at
the interval the server asks for, and unregisters when it stops. Its polls
carry the session's id, so when the worker dies (kill -9, a lost machine) the
tasks it had started time out as WORKER_LOST once the session expires,
instead of after their own start-to-close. A session the server says has
expired (the worker was paused or cut off for too long) is registered anew:
the tasks of the old one have been handed to others already.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from datetime import timedelta

import structlog

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.client import AsyncClient
from sdk.durations import duration
from sdk.errors import FailedPreconditionError, NotFoundError, WeftError

log = structlog.get_logger("weft.worker")

KINDS = {"decision": c.TASK_LIST_KIND_DECISION, "activity": c.TASK_LIST_KIND_ACTIVITY}
RETRY_REGISTER = 2.0  # seconds between tries while the server cannot be reached


class WorkerSession:
    def __init__(
        self,
        client: AsyncClient,
        *,
        kind: str,
        task_lists: Sequence[str],
        identity: str,
        build_id: str = "",
        timeout: timedelta | None = None,
    ) -> None:
        self._client = client
        self._kind = KINDS[kind]
        self._task_lists = list(task_lists)
        self._identity = identity
        self._build_id = build_id
        self._timeout = timeout
        self.id = ""
        """The session's id while registered ("" before, or while the server is away)."""
        self._interval = 3.0

    async def open(self) -> None:
        """Register; WeftError if the server refuses."""
        resp: s.RegisterWorkerResponse = await self._client.rpc(
            "RegisterWorker",
            s.RegisterWorkerRequest(
                namespace=self._client.namespace,
                identity=self._identity,
                host=socket.gethostname(),
                pid=os.getpid(),
                task_lists=[s.WorkerTaskList(name=n, kind=self._kind) for n in self._task_lists],
                build_id=self._build_id,
                session_timeout=duration(self._timeout),
            ),
        )
        self.id = resp.worker_session_id
        self._interval = max(0.2, resp.heartbeat_interval.ToTimedelta().total_seconds())
        log.info("worker.session_opened", session=self.id, identity=self._identity)

    async def keep(self) -> None:
        """Heartbeat until cancelled; register again if the session has ended."""
        while True:
            await asyncio.sleep(self._interval if self.id else RETRY_REGISTER)
            try:
                if not self.id:
                    await self.open()
                    continue
                await self._client.rpc(
                    "RecordWorkerHeartbeat",
                    s.RecordWorkerHeartbeatRequest(
                        namespace=self._client.namespace, worker_session_id=self.id
                    ),
                    timeout=timedelta(seconds=self._interval),
                )
            except (FailedPreconditionError, NotFoundError) as exc:
                log.warning("worker.session_expired", session=self.id, error=exc.message)
                self.id = ""
            except WeftError as exc:  # unreachable past the client's retries: go on trying
                log.warning("worker.heartbeat_failed", session=self.id, error=exc.message)

    def expired(self) -> None:
        """A poll was refused because the session has ended: register at the next beat."""
        if self.id:
            log.warning("worker.session_expired", session=self.id)
            self.id = ""

    async def close(self) -> None:
        """Unregister (a clean stop); what it still had started is reaped at once."""
        if not self.id:
            return
        try:
            # Once: a stopping worker must not wait for a server out of reach
            # (its session then expires on its own, and is reaped as lost).
            await self._client.rpc(
                "UnregisterWorker",
                s.UnregisterWorkerRequest(
                    namespace=self._client.namespace, worker_session_id=self.id
                ),
                timeout=timedelta(seconds=5),
                retried=False,
            )
        except WeftError as exc:
            log.warning("worker.unregister_failed", session=self.id, error=exc.message)
        self.id = ""
