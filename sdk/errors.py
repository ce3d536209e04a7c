"""Every error the SDK raises, rooted at `WeftError`.

Errors from the server carry the gRPC status they arrived with, next to their
definition, so `except NotFoundError` and `err.status` say the same thing. A
class's docstring is its default message. Errors about a workflow's outcome
(`WorkflowFailedError` and its siblings) come from the history, not from a
status code; their `status` is None.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar

import grpc

# The trailing metadata of a RESOURCE_EXHAUSTED refusal for the caller's request
# rate: whole milliseconds to wait before sending the call again (as HTTP's
# Retry-After). The server sets it; the SDK honours it.
RETRY_AFTER_METADATA = "weft-retry-after-ms"
# The trailing metadata of a lane (`LaneService.Exchange`) refused at its opening
# for the client's share of lanes: its call goes unary instead, where the limits
# of calls apply (`sdk.lanes`).
LANE_REFUSED_METADATA = "weft-lane-refused"


def rpc_error(
    code: grpc.StatusCode, details: str, trailers: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.AioRpcError:
    """The error a stub raises for a call that ended with `code`: what a call
    answered without a gRPC call of its own (in process, on a lane) raises, so
    that its caller cannot tell the difference."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), details)


def _summary(cls: type) -> str:
    """A class's default message: the first paragraph of its docstring."""
    doc = inspect.cleandoc(cls.__doc__ or "") or cls.__name__
    return " ".join(doc.split("\n\n")[0].split())


class WeftError(Exception):
    """Weft could not do what was asked."""

    status: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or _summary(type(self)))

    @property
    def message(self) -> str:
        return str(self.args[0])


# -- errors the server answers with -------------------------------------------------


class InvalidArgumentError(WeftError):
    """The request was refused as invalid; nothing was changed."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(WeftError):
    """No such workflow, run, or task (a task token goes stale once its task is over)."""

    status = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(WeftError):
    """A workflow with this id is already open."""

    status = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(WeftError):
    """The workflow run is already closed."""

    status = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(WeftError):
    """The request lost a race with a concurrent update; retrying may succeed."""

    status = grpc.StatusCode.ABORTED


class ResourceExhaustedError(WeftError):
    """A limit was reached; nothing was changed.

    `retry_after` is set when the limit was the caller's request rate: the
    call may be sent again after that long (the client does so by itself,
    within its retry policy). It is None for a limit that waiting does not
    lift, such as a run's pending activities."""

    status = grpc.StatusCode.RESOURCE_EXHAUSTED
    retry_after: timedelta | None = None


class UnavailableError(WeftError):
    """The Weft server cannot be reached, or its database is down, or it is draining."""

    status = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(WeftError):
    """The call did not finish in time."""

    status = grpc.StatusCode.DEADLINE_EXCEEDED


class UnauthenticatedError(WeftError):
    """The server did not accept the caller's credentials."""

    status = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(WeftError):
    """The caller may not do this."""

    status = grpc.StatusCode.PERMISSION_DENIED


class InternalError(WeftError):
    """The server failed in an unexpected way."""

    status = grpc.StatusCode.INTERNAL


_BY_STATUS: dict[grpc.StatusCode, type[WeftError]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        AbortedError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        UnauthenticatedError,
        PermissionDeniedError,
        InternalError,
    )
    if cls.status is not None
}


def from_rpc_error(exc: grpc.RpcError) -> WeftError:
    """The typed error for a failed call, with the server's message."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else None
    cls = _BY_STATUS.get(code, WeftError)
    err = cls(details or None)
    if cls is WeftError:
        err.args = (f"{code.name}: {details or 'no details'}",)
    if isinstance(err, ResourceExhaustedError):
        err.retry_after = retry_after(exc)
    return err


def retry_after(exc: grpc.RpcError) -> timedelta | None:
    """How long the server asked the caller to wait (`RETRY_AFTER_METADATA`),
    None if it did not ask."""
    # (Pairs from grpc.aio, named tuples from the blocking API: both index.)
    trailers: Any = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for item in trailers or ():
        if item[0] == RETRY_AFTER_METADATA:
            try:
                return timedelta(milliseconds=max(0, int(item[1])))
            except ValueError:
                return None  # (not a server of ours: treat it as no hint)
    return None


# -- a workflow's outcome, read from its history ------------------------------------


class WorkflowOutcomeError(WeftError):
    """The workflow closed without a result."""

    status = None

    def __init__(
        self,
        workflow_id: str,
        run_id: str,
        reason: str = "",
        details: Any = None,
    ) -> None:
        what = _summary(type(self)).removeprefix("The workflow ").rstrip(".")
        because = f": {reason}" if reason else ""
        super().__init__(f"workflow {workflow_id} ({run_id}) {what}{because}")
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.reason = reason
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.workflow_id, self.run_id, self.reason, self.details))


class WorkflowFailedError(WorkflowOutcomeError):
    """The workflow failed."""


class WorkflowTimedOutError(WorkflowOutcomeError):
    """The workflow timed out."""


class WorkflowCanceledError(WorkflowOutcomeError):
    """The workflow was canceled."""


class WorkflowTerminatedError(WorkflowOutcomeError):
    """The workflow was terminated."""


# -- a worker's own ------------------------------------------------------------------


class AnswerUnconfirmedError(WeftError):
    """The worker stopped before the server confirmed its answer.

    The answer may have been taken; if it was not, the task times out and the
    server retries it. Workers log it; it does not reach user code.
    """

    status = None


# -- raised by activity code ----------------------------------------------------------


class ActivityFailure(WeftError):
    """The activity failed.

    Raise it (or any exception) from an activity to fail it; `reason` defaults to
    the class name and `details` travel to the decider with the failure.
    """

    status = None
    non_retryable: ClassVar[bool] = False

    def __init__(self, message: str | None = None, *, reason: str = "", details: Any = None):
        super().__init__(message)
        self.reason = reason or type(self).__name__
        self.details = details


class NonRetryableError(ActivityFailure):
    """The activity failed and retrying it cannot help.

    The failure is recorded with `non_retryable` set, which deciders (and the step
    language's `retry`) read as "do not retry".
    """

    non_retryable = True


class ActivityCancelledError(WeftError):
    """The activity was cancelled at the decider's request."""

    status = None


class NonDeterminismError(WeftError):
    """A decider's decisions differ from the ones recorded in the history it replays."""

    status = None
