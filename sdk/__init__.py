"""The Weft SDK: start and steer workflows, and write the deciders and activities
that run them.

    from sdk import Client, AsyncClient, Decider, DecisionTask, activity
    from sdk import ActivityWorker, DeciderWorker

Everything public is re-exported here; the modules behind it may move.
"""

from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys
import types as _types
from typing import TYPE_CHECKING

# Each public name and the module it lives in, imported on its first use (PEP 562):
# the server's engine reads only the wire (`sdk.api`) and two grammars of this
# package, and importing those must not load the clients and workers as well.
_HOMES: dict[str, str] = {
    "AbortedError": "sdk.errors",
    "ActivityCancelledError": "sdk.errors",
    "ActivityDefinition": "sdk.activity",
    "ActivityFailure": "sdk.errors",
    "ActivityInfo": "sdk.activity",
    "ActivityState": "sdk.history",
    "ActivityWorker": "sdk.activity_worker",
    "AlreadyExistsError": "sdk.errors",
    "AsyncClient": "sdk.client",
    "ChildState": "sdk.history",
    "Client": "sdk.sync_client",
    "DeadlineExceededError": "sdk.errors",
    "Decider": "sdk.decider",
    "DeciderWorker": "sdk.decider_worker",
    "Decision": "sdk.decider",
    "DecisionTask": "sdk.decider",
    "Diagnosis": "sdk.diagnostics",
    "Event": "sdk.events",
    "FailedPreconditionError": "sdk.errors",
    "Failure": "sdk.history",
    "Finding": "sdk.diagnostics",
    "ForcedRelease": "sdk.workflows",
    "HistoryPage": "sdk.visibility",
    "InternalError": "sdk.errors",
    "InvalidArgumentError": "sdk.errors",
    "LockHolder": "sdk.workflows",
    "LockInfo": "sdk.workflows",
    "LockState": "sdk.history",
    "Marker": "sdk.history",
    "NonDeterminismError": "sdk.errors",
    "NonRetryableError": "sdk.errors",
    "NotFoundError": "sdk.errors",
    "PayloadConverter": "sdk.converter",
    "PendingActivity": "sdk.workflows",
    "PendingTimer": "sdk.workflows",
    "PermissionDeniedError": "sdk.errors",
    "PollerInfo": "sdk.visibility",
    "ResourceExhaustedError": "sdk.errors",
    "RetryPolicy": "sdk.retry",
    "RunLock": "sdk.workflows",
    "ScheduleDescription": "sdk.schedules",
    "ScheduleRun": "sdk.schedules",
    "Signal": "sdk.history",
    "TaskListInfo": "sdk.visibility",
    "TaskListPage": "sdk.visibility",
    "TimerState": "sdk.history",
    "UnauthenticatedError": "sdk.errors",
    "UnavailableError": "sdk.errors",
    "UndecodablePayload": "sdk.converter",
    "WeftError": "sdk.errors",
    "WorkflowCanceledError": "sdk.errors",
    "WorkflowDescription": "sdk.workflows",
    "WorkflowFailedError": "sdk.errors",
    "WorkflowInfo": "sdk.workflows",
    "WorkflowOutcomeError": "sdk.errors",
    "WorkflowPage": "sdk.visibility",
    "WorkflowRun": "sdk.workflows",
    "WorkflowTerminatedError": "sdk.errors",
    "WorkflowTimedOutError": "sdk.errors",
    "activity": "sdk.activity",
}

__all__ = sorted(_HOMES)

if TYPE_CHECKING:  # the same names, for type checkers (a test holds the two equal)
    from sdk.activity import (
        ActivityDefinition as ActivityDefinition,
    )
    from sdk.activity import (
        ActivityInfo as ActivityInfo,
    )
    from sdk.activity import (
        activity as activity,
    )
    from sdk.activity_worker import ActivityWorker as ActivityWorker
    from sdk.client import AsyncClient as AsyncClient
    from sdk.converter import (
        PayloadConverter as PayloadConverter,
    )
    from sdk.converter import (
        UndecodablePayload as UndecodablePayload,
    )
    from sdk.decider import (
        Decider as Decider,
    )
    from sdk.decider import (
        Decision as Decision,
    )
    from sdk.decider import (
        DecisionTask as DecisionTask,
    )
    from sdk.decider_worker import DeciderWorker as DeciderWorker
    from sdk.diagnostics import (
        Diagnosis as Diagnosis,
    )
    from sdk.diagnostics import (
        Finding as Finding,
    )
    from sdk.errors import (
        AbortedError as AbortedError,
    )
    from sdk.errors import (
        ActivityCancelledError as ActivityCancelledError,
    )
    from sdk.errors import (
        ActivityFailure as ActivityFailure,
    )
    from sdk.errors import (
        AlreadyExistsError as AlreadyExistsError,
    )
    from sdk.errors import (
        DeadlineExceededError as DeadlineExceededError,
    )
    from sdk.errors import (
        FailedPreconditionError as FailedPreconditionError,
    )
    from sdk.errors import (
        InternalError as InternalError,
    )
    from sdk.errors import (
        InvalidArgumentError as InvalidArgumentError,
    )
    from sdk.errors import (
        NonDeterminismError as NonDeterminismError,
    )
    from sdk.errors import (
        NonRetryableError as NonRetryableError,
    )
    from sdk.errors import (
        NotFoundError as NotFoundError,
    )
    from sdk.errors import (
        PermissionDeniedError as PermissionDeniedError,
    )
    from sdk.errors import (
        ResourceExhaustedError as ResourceExhaustedError,
    )
    from sdk.errors import (
        UnauthenticatedError as UnauthenticatedError,
    )
    from sdk.errors import (
        UnavailableError as UnavailableError,
    )
    from sdk.errors import (
        WeftError as WeftError,
    )
    from sdk.errors import (
        WorkflowCanceledError as WorkflowCanceledError,
    )
    from sdk.errors import (
        WorkflowFailedError as WorkflowFailedError,
    )
    from sdk.errors import (
        WorkflowOutcomeError as WorkflowOutcomeError,
    )
    from sdk.errors import (
        WorkflowTerminatedError as WorkflowTerminatedError,
    )
    from sdk.errors import (
        WorkflowTimedOutError as WorkflowTimedOutError,
    )
    from sdk.events import Event as Event
    from sdk.history import (
        ActivityState as ActivityState,
    )
    from sdk.history import (
        ChildState as ChildState,
    )
    from sdk.history import (
        Failure as Failure,
    )
    from sdk.history import (
        LockState as LockState,
    )
    from sdk.history import (
        Marker as Marker,
    )
    from sdk.history import (
        Signal as Signal,
    )
    from sdk.history import (
        TimerState as TimerState,
    )
    from sdk.retry import RetryPolicy as RetryPolicy
    from sdk.schedules import (
        ScheduleDescription as ScheduleDescription,
    )
    from sdk.schedules import (
        ScheduleRun as ScheduleRun,
    )
    from sdk.sync_client import Client as Client
    from sdk.visibility import (
        HistoryPage as HistoryPage,
    )
    from sdk.visibility import (
        PollerInfo as PollerInfo,
    )
    from sdk.visibility import (
        TaskListInfo as TaskListInfo,
    )
    from sdk.visibility import (
        TaskListPage as TaskListPage,
    )
    from sdk.visibility import (
        WorkflowPage as WorkflowPage,
    )
    from sdk.workflows import (
        ForcedRelease as ForcedRelease,
    )
    from sdk.workflows import (
        LockHolder as LockHolder,
    )
    from sdk.workflows import (
        LockInfo as LockInfo,
    )
    from sdk.workflows import (
        PendingActivity as PendingActivity,
    )
    from sdk.workflows import (
        PendingTimer as PendingTimer,
    )
    from sdk.workflows import (
        RunLock as RunLock,
    )
    from sdk.workflows import (
        WorkflowDescription as WorkflowDescription,
    )
    from sdk.workflows import (
        WorkflowInfo as WorkflowInfo,
    )
    from sdk.workflows import (
        WorkflowRun as WorkflowRun,
    )


if not TYPE_CHECKING:  # (for type checkers the names above are the whole surface)

    def __getattr__(name):
        """A public name, imported on its first use; or a submodule, as
        `sdk.errors` was loaded by this file before its names were lazy."""
        home = _HOMES.get(name)
        if home is not None:
            value = getattr(_importlib.import_module(home), name)
        elif name.isidentifier() and not name.startswith("_") and _submodule(name):
            value = _importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value  # once: later uses find it directly
        return value

    def _submodule(name):
        return _importlib_util.find_spec(f"{__name__}.{name}") is not None

    def __dir__():
        return sorted({n for n in globals() if not n.startswith("_")} | set(__all__))


class _Package(_types.ModuleType):
    """`sdk.activity` is both a module and the decorator it defines, and the name
    is the decorator's. Importing the module would set the package's attribute to
    the module (as importing it did before this file bound the decorator over it
    eagerly): that is ignored, so `sdk.activity` stays what `__getattr__` gives."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _HOMES and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
