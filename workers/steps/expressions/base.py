"""What every part of the expression language shares: its errors, `total`,
the `Scope` names are read from, and `ABSENT`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final, ParamSpec, Protocol, TypeVar

from workers.steps.errors import StepInterpreterError


class ExpressionError(StepInterpreterError):
    """A value could not be computed; becomes the step's `ExpressionError`."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.steps.expressions"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownName(ExpressionError):
    """A reference names nothing: `??` and condition targets treat it as absent."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.steps.expressions"


class LimitExceeded(ExpressionError):
    """A value or an expression is past one of the bounds of `limits`."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.steps.expressions"


_P = ParamSpec("_P")
_R = TypeVar("_R")


def total(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Make `function` total: whatever goes wrong inside it (an overflow, a
    recursion too deep, Python's limit on long int texts, memory) comes out
    as an `ExpressionError`, which the step's `on-error` can handle, instead of
    escaping the interpreter and failing every decision task of the run."""

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except ExpressionError:
            raise
        except RecursionError:
            raise LimitExceeded("the value or expression nests too deeply") from None
        except MemoryError:
            raise LimitExceeded("the value is too large to compute") from None
        except OverflowError as exc:
            raise ExpressionError(f"a number, duration or time is out of range: {exc}") from None
        except Exception as exc:  # the promise: nothing but an ExpressionError leaves
            raise ExpressionError(f"{type(exc).__name__}: {exc}") from None

    return wrapper


class Scope(Protocol):
    """The names an expression can see."""

    def root(self, name: str) -> Any:
        """The value of a top-level name; raises `UnknownName` if there is none."""
        ...


class _Absent:
    """The type of `ABSENT`: one shared instance, false, kept by copies."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __copy__(self) -> _Absent:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Absent:
        return self


# "No value at all" (an unknown name), as opposed to None, a value that is null.
ABSENT: Final[Any] = _Absent()
TYPES: Final = ("integer", "double", "string", "boolean", "map", "list", "json", "yaml")
