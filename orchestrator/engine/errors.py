"""Domain errors. The api layer maps each to its gRPC status code, once."""

from __future__ import annotations

from typing import TypeVar


class EngineError(Exception):
    """Base of the errors a request can end in; the message is shown to the caller."""

    code_name = "INTERNAL"
    touched_state = True
    """Whether the command may have changed the run's state before it failed, so
    that a store must drop its copy; `untouched` marks a refusal checked first."""


E = TypeVar("E", bound=EngineError)


def untouched(error: E) -> E:
    """`error`, raised before its command changed anything: a store that refused
    on its current copy of the run keeps it (a run at a limit is refused without
    being read again)."""
    error.touched_state = False
    return error


class InvalidArgument(EngineError):
    code_name = "INVALID_ARGUMENT"


class NotFound(EngineError):
    code_name = "NOT_FOUND"


class AlreadyExists(EngineError):
    code_name = "ALREADY_EXISTS"


class FailedPrecondition(EngineError):
    """The run exists but is closed (Weft separates this from NOT_FOUND)."""

    code_name = "FAILED_PRECONDITION"


class ResourceExhausted(EngineError):
    code_name = "RESOURCE_EXHAUSTED"


class RateLimited(ResourceExhausted):
    """The caller is over its request rate: refused before anything was done,
    and worth sending again once `retry_after` seconds have passed (a limit on
    the run itself, the other RESOURCE_EXHAUSTED, is not)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Aborted(EngineError):
    """Lost a concurrent update; the caller may retry."""

    code_name = "ABORTED"


class Unavailable(EngineError):
    code_name = "UNAVAILABLE"


class Unauthenticated(EngineError):
    """No credentials, or credentials the server does not accept."""

    code_name = "UNAUTHENTICATED"


class PermissionDenied(EngineError):
    """Credentials accepted, but their grant does not cover the call."""

    code_name = "PERMISSION_DENIED"
