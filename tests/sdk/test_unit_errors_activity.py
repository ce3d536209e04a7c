"""`sdk.errors` (status mapping, messages, outcome errors), `@activity` and
`ActivityDefinition.arguments`, `activity.info()` and friends.

`RetryPolicy` is in test_unit_retry.py."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import re
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import grpc
import pytest

import sdk.errors as errors
from sdk import ActivityDefinition, ActivityInfo, PayloadConverter, activity
from sdk.activity import ActivityContext, reset_context, set_context

SC = grpc.StatusCode
CONV = PayloadConverter()


class FakeRpcError(grpc.RpcError):
    def __init__(
        self,
        code: grpc.StatusCode,
        details: str | None,
        trailers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str | None:
        return self._details


MAPPED = [
    (SC.INVALID_ARGUMENT, errors.InvalidArgumentError),
    (SC.NOT_FOUND, errors.NotFoundError),
    (SC.ALREADY_EXISTS, errors.AlreadyExistsError),
    (SC.FAILED_PRECONDITION, errors.FailedPreconditionError),
    (SC.ABORTED, errors.AbortedError),
    (SC.RESOURCE_EXHAUSTED, errors.ResourceExhaustedError),
    (SC.UNAVAILABLE, errors.UnavailableError),
    (SC.DEADLINE_EXCEEDED, errors.DeadlineExceededError),
    (SC.UNAUTHENTICATED, errors.UnauthenticatedError),
    (SC.PERMISSION_DENIED, errors.PermissionDeniedError),
    (SC.INTERNAL, errors.InternalError),
]


@pytest.mark.parametrize(("code", "cls"), MAPPED, ids=[c.name for c, _ in MAPPED])
def test_from_rpc_error_maps_status_and_keeps_message(code: grpc.StatusCode, cls: type) -> None:
    err = errors.from_rpc_error(FakeRpcError(code, f"server says {code.name}"))
    assert type(err) is cls
    assert err.status is code
    assert err.message == str(err) == f"server says {code.name}"


@pytest.mark.parametrize(("code", "cls"), MAPPED, ids=[c.name for c, _ in MAPPED])
@pytest.mark.parametrize("details", ["", None])
def test_from_rpc_error_without_details_uses_the_default(
    code: grpc.StatusCode, cls: type, details: str | None
) -> None:
    err = errors.from_rpc_error(FakeRpcError(code, details))
    assert type(err) is cls
    # The default message is the docstring's first paragraph, on one line.
    first_paragraph = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
    assert err.message == " ".join(first_paragraph.split())


@pytest.mark.parametrize(
    ("code", "details", "message"),
    [
        (SC.UNKNOWN, "boom", "UNKNOWN: boom"),
        (SC.CANCELLED, "gone", "CANCELLED: gone"),
        (SC.UNIMPLEMENTED, None, "UNIMPLEMENTED: no details"),
        (SC.OUT_OF_RANGE, "", "OUT_OF_RANGE: no details"),
        (SC.DATA_LOSS, "x", "DATA_LOSS: x"),
    ],
)
def test_from_rpc_error_unmapped_codes_are_weft_errors(
    code: grpc.StatusCode, details: str | None, message: str
) -> None:
    err = errors.from_rpc_error(FakeRpcError(code, details))
    assert type(err) is errors.WeftError
    assert err.message == message


def test_from_rpc_error_of_a_bare_rpc_error() -> None:
    err = errors.from_rpc_error(grpc.RpcError())
    assert type(err) is errors.WeftError
    assert err.message == "UNKNOWN: no details"


STATUSES = [
    *MAPPED,
    (SC.UNKNOWN, errors.WeftError),
    (None, errors.WorkflowOutcomeError),
    (None, errors.WorkflowFailedError),
    (None, errors.WorkflowTimedOutError),
    (None, errors.WorkflowCanceledError),
    (None, errors.WorkflowTerminatedError),
    (None, errors.ActivityFailure),
    (None, errors.NonRetryableError),
    (None, errors.ActivityCancelledError),
    (None, errors.NonDeterminismError),
]


@pytest.mark.parametrize(("status", "cls"), STATUSES, ids=[c.__name__ for _, c in STATUSES])
def test_status_of_each_error_class(status: grpc.StatusCode | None, cls: type) -> None:
    assert cls.status is status
    assert issubclass(cls, errors.WeftError)


DEFAULT_MESSAGES = [
    (errors.WeftError, "Weft could not do what was asked."),
    (errors.InvalidArgumentError, "The request was refused as invalid; nothing was changed."),
    (errors.AlreadyExistsError, "A workflow with this id is already open."),
    (errors.FailedPreconditionError, "The workflow run is already closed."),
    (errors.PermissionDeniedError, "The caller may not do this."),
    (errors.ActivityCancelledError, "The activity was cancelled at the decider's request."),
    (
        errors.NonDeterminismError,
        "A decider's decisions differ from the ones recorded in the history it replays.",
    ),
]


@pytest.mark.parametrize(("cls", "message"), DEFAULT_MESSAGES)
def test_default_message_is_the_docstring(cls: type[errors.WeftError], message: str) -> None:
    assert cls().message == message
    assert cls("custom").message == "custom"
    assert cls("").message == message


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (errors.ActivityFailure, "The activity failed."),
        (errors.NonRetryableError, "The activity failed and retrying it cannot help."),
    ],
)
def test_default_message_is_the_docstring_summary(cls: type, message: str) -> None:
    assert cls().message == message


OUTCOMES = [
    (errors.WorkflowFailedError, "failed"),
    (errors.WorkflowTimedOutError, "timed out"),
    (errors.WorkflowCanceledError, "was canceled"),
    (errors.WorkflowTerminatedError, "was terminated"),
]


@pytest.mark.parametrize(("cls", "what"), OUTCOMES)
def test_outcome_errors_carry_the_run(cls: type[errors.WorkflowOutcomeError], what: str) -> None:
    err = cls("wf-1", "run-1", "Boom", {"line": 3})
    assert (err.workflow_id, err.run_id, err.reason, err.details) == (
        "wf-1",
        "run-1",
        "Boom",
        {"line": 3},
    )
    assert err.message == f"workflow wf-1 (run-1) {what}: Boom"
    assert cls("wf-1", "run-1").message == f"workflow wf-1 (run-1) {what}"
    assert isinstance(err, errors.WorkflowOutcomeError)


def test_outcome_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(errors.WorkflowFailedError("wf", "run", "Boom", [1])))
    assert (err.workflow_id, err.run_id, err.reason, err.details) == ("wf", "run", "Boom", [1])


class CardDeclined(errors.ActivityFailure):
    """The card was declined."""


@pytest.mark.parametrize(
    ("err", "reason", "details", "non_retryable", "message"),
    [
        (errors.ActivityFailure("m"), "ActivityFailure", None, False, "m"),
        (errors.ActivityFailure("m", reason="R", details={"a": 1}), "R", {"a": 1}, False, "m"),
        (errors.NonRetryableError("n"), "NonRetryableError", None, True, "n"),
        (CardDeclined(details=[1]), "CardDeclined", [1], False, "The card was declined."),
    ],
)
def test_activity_failure_fields(
    err: errors.ActivityFailure, reason: str, details: Any, non_retryable: bool, message: str
) -> None:
    assert (err.reason, err.details, err.non_retryable, err.message) == (
        reason,
        details,
        non_retryable,
        message,
    )


# -- @activity -------------------------------------------------------------------------


@dataclass
class Image:
    url: str
    taken: date


@activity
def resize(image: Image) -> dict[str, Any]:
    return {"url": image.url}


@activity(
    name="charge-card",
    version="2",
    task_list="pci",
    schedule_to_start=timedelta(seconds=1),
    start_to_close=timedelta(seconds=30),
    schedule_to_close=timedelta(minutes=1),
    heartbeat=timedelta(seconds=5),
)
async def charge(card: dict[str, Any]) -> dict[str, Any]:
    return card


@activity()
async def ping() -> str:
    return "pong"


@activity
def several(when: datetime, ids: list[uuid.UUID], n: int = 0, *, tag: str = "") -> Any:
    return when, ids, n, tag


@activity
def loose(a, b):  # type: ignore[no-untyped-def]
    return a, b


@activity
def star(first: Image, *rest: Any, **extra: Any) -> Any:
    return first


@pytest.mark.parametrize(
    ("defn", "fields"),
    [
        (resize, ("resize", "", "", None, None, None, None, False)),
        (ping, ("ping", "", "", None, None, None, None, True)),
        (
            charge,
            (
                "charge-card",
                "2",
                "pci",
                timedelta(seconds=1),
                timedelta(seconds=30),
                timedelta(minutes=1),
                timedelta(seconds=5),
                True,
            ),
        ),
    ],
    ids=["bare", "empty-call", "with-args"],
)
def test_decorator_fields(defn: ActivityDefinition, fields: tuple[Any, ...]) -> None:
    assert isinstance(defn, ActivityDefinition)
    assert (
        defn.name,
        defn.version,
        defn.task_list,
        defn.schedule_to_start,
        defn.start_to_close,
        defn.schedule_to_close,
        defn.heartbeat,
        defn.is_async,
    ) == fields


def test_decorated_functions_stay_callable() -> None:
    assert resize(Image("u", date(2020, 1, 1))) == {"url": "u"}
    assert asyncio.run(charge({"n": 1})) == {"n": 1}
    assert asyncio.run(ping()) == "pong"
    assert resize.fn.__name__ == "resize"


@pytest.mark.parametrize(
    "decorate",
    [lambda d: activity(d), lambda d: activity(name="again")(d), lambda d: activity()(d)],
    ids=["bare", "with-args", "empty-call"],
)
def test_decorating_twice_is_refused(decorate: Any) -> None:
    with pytest.raises(TypeError, match="resize is already an activity"):
        decorate(resize)


@pytest.mark.parametrize("thing", [5, "name"])
def test_decorating_a_non_callable_is_refused(thing: Any) -> None:
    with pytest.raises(TypeError, match="@activity decorates a function"):
        activity(name="x")(thing)


@pytest.mark.parametrize(
    ("defn", "value", "args", "kwargs"),
    [
        (ping, {"ignored": True}, [], {}),
        (ping, None, [], {}),
        (resize, {"url": "u", "taken": "2020-01-02"}, [Image("u", date(2020, 1, 2))], {}),
        (resize, None, [None], {}),
        (star, {"url": "v", "taken": "2021-01-01"}, [Image("v", date(2021, 1, 1))], {}),
        (
            several,
            {"when": "2026-01-01T00:00:00", "ids": [str(uuid.UUID(int=1))], "tag": "t"},
            [],
            {"when": datetime(2026, 1, 1), "ids": [uuid.UUID(int=1)], "tag": "t"},
        ),
        (
            several,
            ["2026-01-01T00:00:00", [str(uuid.UUID(int=2))], 3],
            [datetime(2026, 1, 1), [uuid.UUID(int=2)], 3],
            {},
        ),
        (loose, {"b": 1, "a": {"x": 2}}, [], {"b": 1, "a": {"x": 2}}),
        (loose, [[1], "z"], [[1], "z"], {}),
    ],
    ids=[
        "none-dict",
        "none-null",
        "dataclass",
        "one-null",
        "star",
        "by-name",
        "in-order",
        "untyped-dict",
        "untyped-list",
    ],
)
def test_arguments(defn: ActivityDefinition, value: Any, args: list[Any], kwargs: Any) -> None:
    assert defn.arguments(value, CONV) == (args, kwargs)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"when": "2026-01-01T00:00:00", "zz": 1, "aa": 2},
            "several() got unexpected input fields: aa, zz",
        ),
        (5, "several() takes 4 arguments: give its input as an object or a list"),
        (None, "several() takes 4 arguments"),
    ],
)
def test_arguments_refused(value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        several.arguments(value, CONV)


def test_arguments_too_many_positional() -> None:
    with pytest.raises(TypeError, match="takes 2 arguments"):
        loose.arguments([1, 2, 3], CONV)


INFO = ActivityInfo("default", "wf", "run", "a", "resize", "tl", 2, 5, 6, None, None, None, None)


@pytest.mark.parametrize("call", [activity.info, activity.heartbeat, activity.is_cancelled])
def test_outside_an_activity_is_an_error(call: Any) -> None:
    with pytest.raises(errors.WeftError, match="not inside a running activity"):
        call()


def test_inside_an_activity_context() -> None:
    sent: list[Any] = []
    ctx = ActivityContext(INFO, sent.append)
    token = set_context(ctx)
    try:
        assert activity.info() is INFO
        activity.heartbeat({"step": 1})
        activity.heartbeat()
        assert sent == [{"step": 1}, None]
        assert activity.is_cancelled() is False
        assert ctx.wait_cancelled(0) is False
        ctx.cancel()
        assert activity.is_cancelled() is True
        assert ctx.wait_cancelled(0) is True
    finally:
        reset_context(token)
    with pytest.raises(errors.WeftError):
        activity.info()


HINT = errors.RETRY_AFTER_METADATA


@pytest.mark.parametrize(
    ("trailers", "expected"),
    [
        (((HINT, "250"),), timedelta(milliseconds=250)),
        ((("other", "1"),), None),  # a run's limit: no hint
        (((HINT, "soon"),), None),  # not a server of ours
        (((HINT, "-5"),), timedelta(0)),
    ],
)
def test_a_rate_refusal_carries_the_wait_the_server_asked_for(
    trailers: tuple[tuple[str, str], ...], expected: timedelta | None
) -> None:
    err = errors.from_rpc_error(FakeRpcError(SC.RESOURCE_EXHAUSTED, "slow down", trailers))
    assert isinstance(err, errors.ResourceExhaustedError)
    assert err.retry_after == expected
