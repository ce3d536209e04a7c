"""`Client`: the blocking face of `AsyncClient`.

It owns an event loop on a daemon thread and runs every call of its
`AsyncClient` there, so it works the same from scripts, threads, sync
activities, and code that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.client import DEFAULT_ADDRESS, DEFAULT_NAMESPACE, AsyncClient
from sdk.cluster import Nodes, WorkerInfo
from sdk.converter import DEFAULT_CONVERTER, PayloadConverter
from sdk.diagnostics import Diagnosis
from sdk.errors import WeftError
from sdk.events import Event
from sdk.retry import DEFAULT_RETRY, RetryPolicy
from sdk.schedules import ScheduleDescription
from sdk.tls import TlsConfig
from sdk.visibility import HistoryPage, TaskListPage, WorkflowPage
from sdk.workflows import (
    ForcedRelease,
    LockInfo,
    NamespaceInfo,
    WorkflowDescription,
    WorkflowInfo,
    WorkflowRun,
)

T = TypeVar("T")


class Client:
    """A blocking connection to a Weft server; see `AsyncClient` for each call."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        identity: str | None = None,
        converter: PayloadConverter = DEFAULT_CONVERTER,
        retry: RetryPolicy = DEFAULT_RETRY,
        tls: TlsConfig | bool | None = None,
        api_key: str | None = None,
    ) -> None:
        self.aio = AsyncClient(
            address,
            namespace=namespace,
            identity=identity,
            converter=converter,
            retry=retry,
            tls=tls,
            api_key=api_key,
        )
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="weft-client", daemon=True
        )
        self._thread.start()

    @property
    def namespace(self) -> str:
        return self.aio.namespace

    @property
    def address(self) -> str:
        return self.aio.address

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.run(self.aio.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and wait for it."""
        if threading.get_ident() == self._thread.ident:
            coro.close()
            raise WeftError(
                "a blocking Client call from its own event loop would wait on itself:"
                " in async code (an async activity or decider) use `client.aio`"
            )
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted (Ctrl-C): do not leave the call running
            raise

    # -- the calls ---------------------------------------------------------------------

    def start_workflow(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        workflow_id: str | None = None,
        version: str = "",
        task_list: str = "",
        execution_timeout: timedelta | None = None,
        decider_timeout: timedelta | None = None,
        request_id: str | None = None,
    ) -> WorkflowRun:
        return self.run(
            self.aio.start_workflow(
                workflow_type,
                input,
                workflow_id=workflow_id,
                version=version,
                task_list=task_list,
                execution_timeout=execution_timeout,
                decider_timeout=decider_timeout,
                request_id=request_id,
            )
        )

    def signal_with_start(
        self,
        workflow_type: str,
        signal_name: str,
        signal_input: Any = None,
        *,
        workflow_id: str,
        input: Any = None,
        version: str = "",
        task_list: str = "",
        execution_timeout: timedelta | None = None,
        decider_timeout: timedelta | None = None,
        request_id: str | None = None,
    ) -> WorkflowRun:
        return self.run(
            self.aio.signal_with_start(
                workflow_type,
                signal_name,
                signal_input,
                workflow_id=workflow_id,
                input=input,
                version=version,
                task_list=task_list,
                execution_timeout=execution_timeout,
                decider_timeout=decider_timeout,
                request_id=request_id,
            )
        )

    def signal(
        self,
        workflow_id: str,
        signal_name: str,
        input: Any = None,
        *,
        run_id: str = "",
        request_id: str | None = None,
    ) -> None:
        self.run(
            self.aio.signal(workflow_id, signal_name, input, run_id=run_id, request_id=request_id)
        )

    def cancel(
        self, workflow_id: str, *, run_id: str = "", reason: str = "", request_id: str | None = None
    ) -> None:
        self.run(self.aio.cancel(workflow_id, run_id=run_id, reason=reason, request_id=request_id))

    def terminate(
        self, workflow_id: str, *, run_id: str = "", reason: str = "", details: Any = None
    ) -> None:
        self.run(self.aio.terminate(workflow_id, run_id=run_id, reason=reason, details=details))

    def register_workflow_type(
        self,
        name: str,
        *,
        version: str = "",
        default_task_list: str = "",
        default_execution_timeout: timedelta | None = None,
        default_decider_timeout: timedelta | None = None,
        description: str = "",
        definition: str = "",
    ) -> None:
        self.run(
            self.aio.register_workflow_type(
                name,
                version=version,
                default_task_list=default_task_list,
                default_execution_timeout=default_execution_timeout,
                default_decider_timeout=default_decider_timeout,
                description=description,
                definition=definition,
            )
        )

    def describe(self, workflow_id: str, *, run_id: str = "") -> WorkflowDescription:
        return self.run(self.aio.describe(workflow_id, run_id=run_id))

    def history(self, workflow_id: str, *, run_id: str = "") -> list[Event]:
        return self.run(self.aio.history(workflow_id, run_id=run_id))

    def create_api_key(self, role: str, **grant: Any) -> tuple[str, str]:
        """`AsyncClient.create_api_key`: returns (id, key); the key is shown only here."""
        return self.run(self.aio.create_api_key(role, **grant))

    def add_principal(self, subject: str, role: str, **grant: Any) -> str:
        return self.run(self.aio.add_principal(subject, role, **grant))

    def list_credentials(
        self, *, namespace: str = "", include_revoked: bool = False
    ) -> list[a.Credential]:
        return self.run(
            self.aio.list_credentials(namespace=namespace, include_revoked=include_revoked)
        )

    def revoke_credential(self, credential_id: str) -> None:
        self.run(self.aio.revoke_credential(credential_id))

    def list_workers(
        self, *, task_list: str = "", ended_within: timedelta | None = None
    ) -> list[WorkerInfo]:
        return self.run(self.aio.list_workers(task_list=task_list, ended_within=ended_within))

    def list_nodes(self, *, gone_within: timedelta | None = None) -> Nodes:
        return self.run(self.aio.list_nodes(gone_within=gone_within))

    # -- looking over a namespace (AsyncClient's, in sdk/visibility.py) -----------

    def list_page(self, **filters: Any) -> WorkflowPage:
        return self.run(self.aio.list_page(**filters))

    def count_workflows(self, **filters: Any) -> dict[str, int]:
        return self.run(self.aio.count_workflows(**filters))

    def list_task_lists(self) -> TaskListPage:
        return self.run(self.aio.list_task_lists())

    def history_page(
        self, workflow_id: str, *, run_id: str = "", first_event_id: int = 1, page_size: int = 100
    ) -> HistoryPage:
        return self.run(
            self.aio.history_page(
                workflow_id, run_id=run_id, first_event_id=first_event_id, page_size=page_size
            )
        )

    # -- schedules (AsyncClient's, in sdk/schedules.py) ---------------------------

    def create_schedule(self, name: str, *, workflow_type: str, **options: Any) -> None:
        self.run(self.aio.create_schedule(name, workflow_type=workflow_type, **options))

    def describe_schedule(self, name: str, *, next_count: int = 0) -> ScheduleDescription:
        return self.run(self.aio.describe_schedule(name, next_count=next_count))

    def list_schedules(self) -> list[ScheduleDescription]:
        return self.run(self.aio.list_schedules())

    def update_schedule(self, name: str, **changes: Any) -> None:
        self.run(self.aio.update_schedule(name, **changes))

    def pause_schedule(self, name: str, *, note: str = "") -> None:
        self.run(self.aio.pause_schedule(name, note=note))

    def unpause_schedule(self, name: str, *, note: str = "") -> None:
        self.run(self.aio.unpause_schedule(name, note=note))

    def trigger_schedule(self, name: str) -> str:
        return self.run(self.aio.trigger_schedule(name))

    def backfill_schedule(self, name: str, start: datetime, end: datetime) -> int:
        return self.run(self.aio.backfill_schedule(name, start, end))

    def delete_schedule(self, name: str) -> None:
        self.run(self.aio.delete_schedule(name))

    def register_namespace(self, name: str, *, retention: str = "", description: str = "") -> None:
        self.run(self.aio.register_namespace(name, retention=retention, description=description))

    def describe_namespace(self, name: str) -> NamespaceInfo:
        return self.run(self.aio.describe_namespace(name))

    def diagnose(self, *, no_poller_after: timedelta | None = None) -> Diagnosis:
        """`AsyncClient.diagnose`: what looks stuck in this namespace (`weft doctor`)."""
        return self.run(self.aio.diagnose(no_poller_after=no_poller_after))

    def request_replay(
        self,
        workflow_id: str,
        mode: Literal["resuming", "from", "from_start", "last"],
        *,
        step: str = "",
        force: bool = False,
        point: Any = None,
        run_id: str = "",
        reason: str = "",
    ) -> tuple[str, bool]:
        return self.run(
            self.aio.request_replay(
                workflow_id,
                mode,
                step=step,
                force=force,
                point=point,
                run_id=run_id,
                reason=reason,
            )
        )

    def list_locks(self, name: str = "") -> list[LockInfo]:
        return self.run(self.aio.list_locks(name))

    def force_release_lock(self, name: str, *, reason: str = "") -> ForcedRelease:
        return self.run(self.aio.force_release_lock(name, reason=reason))

    def iter_history(
        self, workflow_id: str, *, run_id: str = "", follow: bool = False, page_size: int = 0
    ) -> Iterator[Event]:
        events: AsyncGenerator[Event] = self.aio.iter_history(
            workflow_id, run_id=run_id, follow=follow, page_size=page_size
        )
        try:
            while True:
                try:
                    yield self.run(_next(events))
                except StopAsyncIteration:
                    return
        finally:
            with contextlib.suppress(RuntimeError):  # still running after an interrupt
                self.run(events.aclose())

    def list(
        self,
        *,
        status: Literal["open", "closed"] | None = None,
        workflow_type: str = "",
        workflow_id: str = "",
        limit: int = 100,
    ) -> list[WorkflowInfo]:
        return self.run(
            self.aio.list(
                status=status, workflow_type=workflow_type, workflow_id=workflow_id, limit=limit
            )
        )

    def result(
        self, workflow_id: str, *, run_id: str = "", timeout: timedelta | None = None
    ) -> Any:
        return self.run(self.aio.result(workflow_id, run_id=run_id, timeout=timeout))


async def _next(events: AsyncIterator[T]) -> T:
    return await anext(events)
