"""The Weft SDK: start and steer workflows, and write the deciders and activities
that run them.

    from sdk import Client, AsyncClient, Decider, DecisionTask, activity
    from sdk import ActivityWorker, DeciderWorker

Everything public is re-exported here; the modules behind it may move.
"""

from sdk.activity import ActivityDefinition, ActivityInfo, activity
from sdk.activity_worker import ActivityWorker
from sdk.client import AsyncClient
from sdk.converter import PayloadConverter, UndecodablePayload
from sdk.decider import Decider, Decision, DecisionTask
from sdk.decider_worker import DeciderWorker
from sdk.diagnostics import Diagnosis, Finding
from sdk.errors import (
    AbortedError,
    ActivityCancelledError,
    ActivityFailure,
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NonDeterminismError,
    NonRetryableError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    WeftError,
    WorkflowCanceledError,
    WorkflowFailedError,
    WorkflowOutcomeError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
)
from sdk.events import Event
from sdk.history import ActivityState, ChildState, Failure, LockState, Marker, Signal, TimerState
from sdk.retry import RetryPolicy
from sdk.schedules import ScheduleDescription, ScheduleRun
from sdk.sync_client import Client
from sdk.visibility import HistoryPage, PollerInfo, TaskListInfo, TaskListPage, WorkflowPage
from sdk.workflows import (
    ForcedRelease,
    LockHolder,
    LockInfo,
    PendingActivity,
    PendingTimer,
    RunLock,
    WorkflowDescription,
    WorkflowInfo,
    WorkflowRun,
)

__all__ = [
    "AbortedError",
    "ActivityCancelledError",
    "ActivityDefinition",
    "ActivityFailure",
    "ActivityInfo",
    "ActivityState",
    "ActivityWorker",
    "AlreadyExistsError",
    "AsyncClient",
    "ChildState",
    "Client",
    "DeadlineExceededError",
    "Decider",
    "DeciderWorker",
    "Decision",
    "DecisionTask",
    "Diagnosis",
    "Event",
    "FailedPreconditionError",
    "Failure",
    "Finding",
    "ForcedRelease",
    "HistoryPage",
    "InternalError",
    "InvalidArgumentError",
    "LockHolder",
    "LockInfo",
    "LockState",
    "Marker",
    "NonDeterminismError",
    "NonRetryableError",
    "NotFoundError",
    "PayloadConverter",
    "PendingActivity",
    "PendingTimer",
    "PermissionDeniedError",
    "PollerInfo",
    "ResourceExhaustedError",
    "RetryPolicy",
    "RunLock",
    "ScheduleDescription",
    "ScheduleRun",
    "Signal",
    "TaskListInfo",
    "TaskListPage",
    "TimerState",
    "UnauthenticatedError",
    "UnavailableError",
    "UndecodablePayload",
    "WeftError",
    "WorkflowCanceledError",
    "WorkflowDescription",
    "WorkflowFailedError",
    "WorkflowInfo",
    "WorkflowOutcomeError",
    "WorkflowPage",
    "WorkflowRun",
    "WorkflowTerminatedError",
    "WorkflowTimedOutError",
    "activity",
]
