"""The SDK's public surface: `sdk.__all__` is pinned, and the CONTRACT names are there."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import sdk

EXPECTED_ALL = [
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

CONTRACT_NAMES = [
    "Client",
    "AsyncClient",
    "Decider",
    "DecisionTask",
    "activity",
    "ActivityWorker",
    "DeciderWorker",
]

# Where each CONTRACT name is defined: the re-export must be that very object.
DEFINED_IN = {
    "Client": "sdk.sync_client",
    "AsyncClient": "sdk.client",
    "Decider": "sdk.decider",
    "DecisionTask": "sdk.decider",
    "activity": "sdk.activity",
    "ActivityWorker": "sdk.activity_worker",
    "DeciderWorker": "sdk.decider_worker",
    "PayloadConverter": "sdk.converter",
    "Event": "sdk.events",
    "RetryPolicy": "sdk.retry",
    "WeftError": "sdk.errors",
    "NonDeterminismError": "sdk.errors",
    "ActivityState": "sdk.history",
    "WorkflowRun": "sdk.workflows",
}


def test_all_is_exactly_the_pinned_list() -> None:
    assert list(sdk.__all__) == EXPECTED_ALL


def test_all_is_sorted_and_has_no_duplicates() -> None:
    assert sorted(sdk.__all__) == list(sdk.__all__)
    assert len(set(sdk.__all__)) == len(sdk.__all__)


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_exported_name_is_importable(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from sdk import {name}", namespace)
    assert namespace[name] is getattr(sdk, name)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from sdk import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == EXPECTED_ALL


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_contract_names_are_exported(name: str) -> None:
    assert name in sdk.__all__
    assert getattr(sdk, name) is not None


def test_contract_import_line_works() -> None:
    namespace: dict[str, object] = {}
    exec(
        "from sdk import Client, AsyncClient, Decider, DecisionTask, activity, "
        "ActivityWorker, DeciderWorker",
        namespace,
    )
    assert {n for n in namespace if n != "__builtins__"} == set(CONTRACT_NAMES)


@pytest.mark.parametrize(("name", "module"), sorted(DEFINED_IN.items()))
def test_reexports_are_the_defining_objects(name: str, module: str) -> None:
    assert getattr(sdk, name) is getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    "name",
    [n for n in EXPECTED_ALL if n.endswith("Error") or n == "ActivityFailure"],
)
def test_every_exported_error_is_a_weft_error(name: str) -> None:
    cls = getattr(sdk, name)
    assert isinstance(cls, type)
    assert issubclass(cls, sdk.WeftError)


def test_exported_classes_are_classes_and_activity_is_the_decorator() -> None:
    for name in EXPECTED_ALL:
        if name == "activity":
            continue
        assert isinstance(getattr(sdk, name), type), name
    assert callable(sdk.activity)
    assert type(sdk.activity).__name__ == "_Activity"


def test_the_lazy_names_and_the_type_checkers_imports_agree() -> None:
    """`sdk/__init__` names each export twice: in `_HOMES`, which imports it on first
    use, and under TYPE_CHECKING for type checkers. Both say the same."""
    tree = ast.parse(Path(sdk.__file__).read_text())
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imported = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == sdk._HOMES


def test_activity_is_the_decorator_whatever_was_imported_first() -> None:
    """`sdk.activity` is also a module: importing it first must not make the name
    the module (a fresh interpreter, so no earlier import decides it)."""
    script = (
        "import sdk.activity_worker, sdk.activity\n"
        "from sdk import activity\n"
        "import sdk\n"
        "assert type(activity).__name__ == '_Activity', activity\n"
        "assert sdk.activity is activity\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=60)


def test_submodules_are_attributes_and_other_names_are_not() -> None:
    """`import sdk; sdk.errors` works as when this file imported its modules
    eagerly; a name that is neither export nor submodule is an AttributeError."""
    assert sdk.errors is importlib.import_module("sdk.errors")
    for name in ("nope", "a.b", "_hidden"):
        assert not hasattr(sdk, name)
