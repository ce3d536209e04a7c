"""`weft runner` and `weft decider`: a module that cannot be loaded, or holds
nothing to run, is refused in one line with exit 2; the order example runs end
to end on three worker processes, each of which exits 0 on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import error_line, ok, ok_json, raw_weft, weft
from tests.helpers import unique, wait_until
from tests.workerproc import WorkerProcess

NOTHING = "x = 1\n"
RAISES = "raise RuntimeError('boom at import')\n"
SYNTAX = "def broken(:\n"
MODULE_FILES = {
    "nothing": NOTHING,
    "raises": RAISES,
    "syntax": SYNTAX,
    "exits": "import sys\n\nsys.exit(3)\n",
    "halts": "class Halt(BaseException):\n    pass\n\nraise Halt('halt at import')\n",
}
NO_TASK_LIST_ACTIVITY = "from sdk import activity\n\n@activity\ndef lonely(x):\n    return x\n"
NO_TASK_LIST_DECIDER = (
    "from sdk import Decider\n\n"
    "class Lonely(Decider):\n"
    "    workflow_type = 'lonely'\n\n"
    "    def decide(self, task):\n"
    "        task.complete(None)\n"
)


def module_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("kind", ["runner", "decider"])
@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("no_such_module_anywhere", "cannot import no_such_module_anywhere"),
        ("examples.no_such_example", "cannot import examples.no_such_example"),
        ("/nonexistent/dir/flow.py", "no such file"),
        ("json", "no "),
        ("FILE:nothing", "no "),
        ("FILE:raises", "boom at import"),
        ("FILE:syntax", "SyntaxError"),
        ("FILE:exits", "it called sys.exit(3) while being imported"),
        ("FILE:halts", "Halt: halt at import"),
    ],
    ids=[
        "unknown-module",
        "unknown-submodule",
        "missing-file",
        "module-without-workers",
        "file-without-workers",
        "raises-on-import",
        "syntax-error",
        "exits-on-import",
        "base-exception-on-import",
    ],
)
def test_a_module_that_cannot_run_exits_2(
    kind: str, module: str, says: str, address: str, tmp_path: Path
) -> None:
    if module.startswith("FILE:"):
        name = module.removeprefix("FILE:")
        module = module_file(tmp_path, name, MODULE_FILES[name])
    done = weft(kind, "--task-list", "tl", module, address=address, timeout=30)
    line = error_line(done, kind, 2)
    assert says in line, line
    if says == "no ":
        wanted = "no @activity functions" if kind == "runner" else "no Decider subclasses"
        assert wanted in line


@pytest.mark.parametrize("kind", ["runner", "decider"])
@pytest.mark.parametrize(
    ("name", "says"),
    [("exits", "it called sys.exit(3) while being imported"), ("halts", "Halt: halt at import")],
    ids=["exits-on-import", "base-exception-on-import"],
)
def test_a_module_named_for_import_that_stops_the_import_exits_2(
    kind: str, name: str, says: str, address: str, tmp_path: Path
) -> None:
    """As by path, so by name (found from the current directory)."""
    module = f"weft_{name}_{unique('m').replace('-', '_')}"
    module_file(tmp_path, module, MODULE_FILES[name])
    done = weft(kind, "--task-list", "tl", module, address=address, timeout=30, cwd=tmp_path)
    assert f"cannot import {module}: {says}" in error_line(done, kind, 2)


def test_a_decider_that_exits_when_created_exits_2(address: str, tmp_path: Path) -> None:
    """Its class is created as the module loads: a `sys.exit()` there is a load
    error in one line, not a silent exit with its code."""
    text = NO_TASK_LIST_DECIDER.replace(
        "    def decide", "    def __init__(self):\n        raise SystemExit(3)\n\n    def decide"
    )
    path = module_file(tmp_path, "exits_when_created", text)
    done = weft("decider", "--task-list", "tl", path, address=address, timeout=30)
    assert "cannot create Lonely(): it called sys.exit(3)" in error_line(done, "decider", 2)


@pytest.mark.parametrize(
    ("kind", "text"),
    [("runner", NO_TASK_LIST_ACTIVITY), ("decider", NO_TASK_LIST_DECIDER)],
    ids=["runner", "decider"],
)
def test_no_task_list_exits_2(kind: str, text: str, address: str, tmp_path: Path) -> None:
    path = module_file(tmp_path, unique("flow").replace("-", "_"), text)
    line = error_line(weft(kind, path, address=address, timeout=30), kind, 2)
    assert "no task list" in line


@pytest.mark.parametrize("kind", ["runner", "decider"])
@pytest.mark.parametrize(
    "args",
    [[], ["--concurrency", "0", "examples.order"], ["--grace", "soon", "examples.order"]],
    ids=["no-module", "zero-concurrency", "bad-grace"],
)
def test_worker_usage_errors_exit_2(kind: str, args: list[str], address: str) -> None:
    error_line(weft(kind, *args, address=address, timeout=30), kind, 2)


# -- the order example on three worker processes ---------------------------------------


class Worker(WorkerProcess):
    """`weft KIND --address A --identity NAME ARGS…`, started at once."""

    def __init__(self, address: str, log_dir: Path, name: str, kind: str, *args: str) -> None:
        super().__init__(kind, list(args), address, log_dir, name)
        self.start()

    async def logged(self, event: str) -> None:
        async def check() -> bool:
            assert self.running, self.log()
            return f'"event": "{event}"' in self.log()

        await wait_until(check, timeout=30)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


async def test_the_order_example_on_worker_processes(
    address: str, tmp_path: Path, workers: list[Worker]
) -> None:
    decider = Worker(address, tmp_path, "decider", "decider", "examples.order")
    workers.append(decider)
    workers.append(
        Worker(
            address, tmp_path, "runner-orders", "runner", "--task-list", "orders", "examples.order"
        )
    )
    workers.append(
        Worker(address, tmp_path, "runner-pci", "runner", "--task-list", "pci", "examples.order")
    )
    # `weft start order` needs no --task-list once the decider has registered the type
    await decider.logged("decider.registered")
    for worker in workers:
        await worker.logged("worker.started")

    order = {"sku": "book", "quantity": 1, "amount": 3}
    out = ok(weft("start", "order", "--input", json.dumps(order), address=address))
    workflow_id = out.split()[1]
    assert workflow_id.startswith("order-"), out
    ok(weft("signal", workflow_id, "delivered", "--input", '{"to": "porch"}', address=address))

    async def closed() -> dict[str, Any] | None:
        doc: dict[str, Any] = ok_json(weft("describe", workflow_id, "--json", address=address))
        return doc if doc["status"] != "open" else None

    doc = await wait_until(closed, timeout=45, interval=0.25)
    assert doc is not None
    logs = "\n".join(w.log() for w in workers)
    assert doc["status"] == "completed", logs
    assert doc["task_list"] == "orders"

    events = ok_json(weft("history", workflow_id, "--json", address=address))["events"]
    result = events[-1]["attributes"]["result"]
    assert events[-1]["type"] == "WorkflowSuccess"
    assert result["order"] == order
    assert result["charge"].startswith("CH-")
    assert result["tracking"].startswith("TRK-")
    assert result["delivered"] == {"to": "porch"}
    started = {
        e["attributes"]["activity_type"]["name"]
        if isinstance(e["attributes"].get("activity_type"), dict)
        else e["attributes"].get("activity_type"): e
        for e in events
        if e["type"] == "ActivityScheduled"
    }
    assert set(started) == {"reserve-stock", "charge-card", "ship"}
    assert started["charge-card"]["attributes"]["task_list"] == "pci"
    identities = {e["attributes"].get("identity") for e in events if e["type"] == "ActivityStarted"}
    assert identities == {"runner-orders", "runner-pci"}

    for worker in workers:
        worker.proc.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            code = worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"{worker.log_path.stem} did not exit within 10s of SIGTERM\n{worker.log()}"
            )
        assert code == 0, worker.log()
        assert "Traceback" not in worker.log()


@pytest.mark.parametrize("kind", ["runner", "decider"])
def test_a_module_with_a_missing_dependency_exits_2(
    kind: str, address: str, tmp_path: Path
) -> None:
    """A dotted module found from the current directory, which imports something
    not installed: the message names the missing dependency."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "flows.py").write_text("import not_installed_dependency_xyz\n")
    done = weft(kind, "--task-list", "tl", "mypkg.flows", address=address, cwd=tmp_path)
    line = error_line(done, kind, 2)
    assert "cannot import mypkg.flows" in line
    assert "not_installed_dependency_xyz" in line


TWO_PINGS = "from sdk import activity\n\n@activity(task_list='t')\ndef ping():\n    return 1\n"


def test_two_activities_of_one_name_exit_2_in_one_line(tmp_path: Path) -> None:
    first = tmp_path / "one" / "pings.py"
    second = tmp_path / "two" / "pings.py"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(TWO_PINGS)
    done = weft("runner", str(first), str(second), address="127.0.0.1:1")
    assert "two activities are named 'ping'" in error_line(done, "runner", 2)


def test_a_module_given_by_path_imports_its_siblings(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("NAME = 'from-a-sibling'\n")
    tasks = tmp_path / "tasks.py"
    tasks.write_text(
        "from helper import NAME\nfrom sdk import Decider\n\n"
        "class Sibling(Decider):\n    workflow_type = NAME\n\n"
        "    def decide(self, task):\n        pass\n"
    )
    from workers.loader import deciders_in, load

    (decider,) = deciders_in(load([str(tasks)]))
    assert decider.type_name() == "from-a-sibling"


def test_a_decider_needs_something_to_poll(address: str, tmp_path: Path) -> None:
    line = error_line(weft("decider", address=address, timeout=30), "decider", 2)
    assert "nothing to decide" in line
    missing = tmp_path / "no-such-folder"
    done = weft("decider", "--definitions", str(missing), address=address, timeout=30)
    assert f"--definitions {missing}: not a directory" in error_line(done, "decider", 2)


def test_a_definition_past_the_limit_is_refused_before_it_is_read_whole(
    address: str, tmp_path: Path
) -> None:
    """As `weft register` refuses it: `--definitions` and `weft server
    --embed-definitions` read at most one byte past the limit."""
    folder = tmp_path / "defs"
    folder.mkdir()
    huge = folder / "huge.yaml"
    huge.write_text("name: huge\nsteps:\n  - return done\n" + "#" * (256 * 1024))
    done = weft("decider", "--definitions", str(folder), address=address, timeout=30)
    line = error_line(done, "decider", 2)
    assert f"{huge}: the definition is more than 262144 bytes" in line, line
    embedded = raw_weft(
        "server", "--db", f"sqlite:///{tmp_path / 'w.db'}", "--listen", "127.0.0.1:0",
        "--embed-definitions", str(folder), timeout=30,
    )  # fmt: skip
    line = error_line(embedded, "server", 2)
    assert f"{huge}: the definition is more than 262144 bytes" in line, line


async def test_a_decider_with_only_a_task_list_runs_registered_step_workflows(
    address: str, tmp_path: Path, workers: list[Worker]
) -> None:
    name, task_list = unique("registered"), unique("steps")
    path = tmp_path / "registered.yaml"
    path.write_text(
        f"name: {name}\ntask_list: {task_list}\nsteps:\n  - let n = 6 * 7\n  - return ${{n}}\n"
    )
    ok(weft("register", str(path), address=address))
    decider = Worker(address, tmp_path, "decider", "decider", "--task-list", task_list)
    workers.append(decider)
    await decider.logged("worker.started")
    out = ok(weft("start", name, "--wait", "--timeout", "30s", address=address, timeout=45))
    assert out.strip().splitlines()[-1].split() == ["result", "42"]


def test_a_runner_without_modules_still_needs_a_task_list(address: str) -> None:
    line = error_line(weft("runner", address=address, timeout=30), "runner", 2)
    assert "no task list" in line


# -- the built-in activities on a runner process ---------------------------------------------

RUN_ONE = """\
from datetime import timedelta

from sdk import Decider


class RunOne(Decider):
    '''Runs the activity its input names; closes with its result, or fails with
    its failure's reason and message.'''

    workflow_type = "run-one"

    def decide(self, task):
        one = task.activities.get("one")
        if one is None:
            task.schedule_activity(
                "one", task.input["type"], task.input["input"], start_to_close=timedelta(seconds=30)
            )
        elif one.status == "succeeded":
            task.complete(one.result)
        elif not one.is_open:
            failure = one.failure
            reason = failure.reason if failure else one.status
            task.fail(reason, {"message": failure.message if failure else ""})
"""
SHELL_TASK = {
    "type": "weft.shell",
    "input": {"command": 'echo "hi from $WHO"', "env": {"WHO": "sh"}},
}


async def closed_run(address: str, workflow_id: str) -> dict[str, Any]:
    """The run's last event, once it is a close."""

    async def check() -> dict[str, Any] | None:
        doc = ok_json(weft("history", workflow_id, "--json", address=address))
        last: dict[str, Any] = doc["events"][-1]
        return last if last["type"].startswith("Workflow") and last["event_id"] > 1 else None

    return await wait_until(check, timeout=45, interval=0.25)


@pytest.mark.parametrize(
    ("allow_shell", "loop"),
    [(False, "asyncio"), (True, "asyncio"), (True, "uvloop")],
    ids=["refused", "allowed", "allowed-on-uvloop"],
)
async def test_a_runner_runs_shell_tasks_only_with_allow_shell(
    allow_shell: bool, loop: str, address: str, tmp_path: Path, workers: list[Worker]
) -> None:
    """A runner with no modules runs the built-ins; `weft.shell` only with
    `--allow-shell`, and without it the task fails at once, saying so. On
    uvloop too (its subprocess is forked by libuv: gRPC's fork handlers, which
    the `weft` command turns off, crashed it there)."""
    task_list = unique("builtins")
    flow = module_file(tmp_path, "run_one", RUN_ONE)
    extra = ["--event-loop", loop, *(["--allow-shell"] if allow_shell else [])]
    decider = Worker(address, tmp_path, "decider", "decider", "--task-list", task_list, flow)
    runner = Worker(address, tmp_path, "runner", "runner", "--task-list", task_list, *extra)
    workers += [decider, runner]
    for worker in workers:
        await worker.logged("worker.started")
    assert '"weft.http"' in runner.log() and '"weft.shell"' in runner.log()
    assert f'"event_loop": "{loop}"' in runner.log()

    args = ["--task-list", task_list, "--input", json.dumps(SHELL_TASK), "--json"]
    workflow_id = ok_json(weft("start", "run-one", *args, address=address))["workflow_id"]
    close = await closed_run(address, workflow_id)

    logs = decider.log() + runner.log()
    if allow_shell:
        assert close["type"] == "WorkflowSuccess", logs
        assert close["attributes"]["result"] == {
            "stdout": "hi from sh\n",
            "stderr": "",
            "exit_code": 0,
        }
    else:
        assert close["type"] == "WorkflowFailed", logs
        assert close["attributes"]["reason"] == "ShellNotAllowed"
        message = close["attributes"]["details"]["message"]
        assert "start it with `weft runner --allow-shell`" in message
