"""Every error class of the step package derives from one root,
`StepInterpreterError`, and keeps the bases callers catch it by."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import workers.steps
from workers.steps.errors import FlowSignal, StepInterpreterError


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(workers.steps.__path__, "workers.steps."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and value.__module__ == info.name
            ):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_error_of_the_package_has_the_one_root() -> None:
    classes = _exception_classes()
    assert {"ExpressionError", "DefinitionError", "StepError"} <= {
        cls.__name__ for cls in classes.values()
    }
    outside = [
        name
        for name, cls in classes.items()
        if not issubclass(cls, StepInterpreterError | FlowSignal)
    ]
    assert outside == []


def test_value_errors_stay_value_errors() -> None:
    from workers.steps.definition import DefinitionError
    from workers.steps.retrying import RetrySpecError
    from workers.steps.yamlbound import AliasBomb

    for cls in (DefinitionError, RetrySpecError, AliasBomb):
        assert issubclass(cls, ValueError)
        assert issubclass(cls, StepInterpreterError)
