"""`weft server --embed MODULE`: the module's decider and runner inside the
server's process, calling the node without gRPC. Real `weft server` processes on
both databases, driven over gRPC by the SDK like any other node:

- a workflow runs to its end with no worker process, its tasks taken by the
  embedded workers (their identities in the history);
- a kill -9 while an activity runs loses nothing acknowledged: after the
  restart the lost attempt times out, another runs, and the run completes;
- SIGTERM lets an activity in flight finish and record its result first; a
  second SIGTERM abandons it and exits 1 at once, as `weft runner` does, also
  when it is a sync one its thread still runs;
- with `--workers 2`, each process runs its own workers, and a signal sent to
  the whole process group (a terminal's Ctrl-C) still drains them;
- under `--auth`, the embedded workers call as a worker of their own task
  lists (their principal in the events they append), in one process and in
  each of `--workers 2`, while a caller without a key is refused;
- what cannot run is one line and exit 2 before the database is opened
  (modules with nothing to run or that do not load, a concurrency without
  `--embed`), also under `--workers 2` (and a module name with a space
  there); a worker that fails at its start stops the server with exit 1;
- a module given twice by path is imported once, and an activity that names no
  task list runs on its workflow's, the list the module's decider polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.processes import spawn, stop
from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.errors import UnauthenticatedError
from tests.cli.support import raw_weft
from tests.helpers import unique, wait_until
from tests.serverproc import WEFT, ServerProcess, free_port
from workers.embedded import build as build_embedded

FLOW = str(Path(__file__).with_name("embedded_flow.py"))
STEPS = Path(__file__).with_name("embedded_steps")
WORKFLOW = "embedded-stamp"
RESULT_WAIT = timedelta(seconds=60)


@pytest.fixture
async def embedded(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    # A short session timeout: the tasks of a killed process come back soon.
    extra = ("--embed", FLOW, "--worker-session-timeout", "2s")
    proc = ServerProcess(db_url, tmp_path, name="embedded", extra_args=extra)
    await proc.start()
    yield proc
    proc.stop()


async def start(client: AsyncClient) -> str:
    workflow_id = unique("embedded")
    await client.start_workflow(
        WORKFLOW,
        None,
        workflow_id=workflow_id,
        task_list="embedded",
        decider_timeout=timedelta(seconds=2),  # a decision task of a killed process
    )
    return workflow_id


async def events(client: AsyncClient, workflow_id: str, kind: str) -> list[Any]:
    return [e for e in await client.history(workflow_id) if e.type == kind]


async def identities(client: AsyncClient, workflow_id: str, kind: str) -> list[Any]:
    return [e.get("identity") for e in await events(client, workflow_id, kind)]


async def started(client: AsyncClient, workflow_id: str, signal_input: dict[str, Any]) -> None:
    """Signal `go` and wait until the activity has started."""
    await client.signal(workflow_id, "go", signal_input)
    await wait_until(lambda: identities(client, workflow_id, "ActivityStarted"))


async def test_a_workflow_runs_on_the_embedded_workers(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        await client.signal(workflow_id, "go", {"value": 7})
        assert await client.result(workflow_id, timeout=RESULT_WAIT) == {"stamped": 7}
        deciders = await identities(client, workflow_id, "DeciderStarted")
        runners = await identities(client, workflow_id, "ActivityStarted")
    assert deciders and all(str(i).endswith("/decider") for i in deciders), deciders
    assert runners and all(str(i).endswith("/runner") for i in runners), runners


async def test_kill_9_mid_activity_loses_nothing_acknowledged(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        await started(client, workflow_id, {"value": "kept", "hold": 120})
        # The node notes which session started which run in a batch every
        # second (orchestrator/dispatch/sessions.py): a kill before that leaves
        # the attempt to its own timeout (30 s), not its session's.
        run_id = (await client.describe(workflow_id)).info.run_id
        await wait_until(lambda: _now(_session_noted(embedded.db_url, run_id)))
        embedded.kill9()
        await embedded.start()
        # The attempt the killed process ran times out (WORKER_LOST), and the
        # decider of the new process schedules another.
        assert await client.result(workflow_id, timeout=RESULT_WAIT) == {"stamped": "kept"}
        signals = await events(client, workflow_id, "Signal")
        lost = await events(client, workflow_id, "ActivityTimedOut")
    assert [e.get("input") for e in signals] == [{"value": "kept", "hold": 120}]
    assert [e.get("timeout_type") for e in lost] == ["WORKER_LOST"]


async def test_sigterm_lets_the_activity_in_flight_finish(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        await started(client, workflow_id, {"value": 1, "hold": 3})
        signalled = datetime.now(UTC)
        assert await embedded.terminate() == 0, embedded.log_tail()
        await embedded.start()
        successes = await events(client, workflow_id, "ActivitySuccess")
        assert len(successes) == 1, "the activity's result was not recorded before the exit"
        assert successes[0].get("result") == {"stamped": 1}
        assert successes[0].timestamp > signalled, "nothing was in flight at the stop"
        assert await client.result(workflow_id, timeout=RESULT_WAIT) == {"stamped": 1}


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_second_sigterm_abandons_the_activity_and_exits_1(
    embedded: ServerProcess, sync: bool
) -> None:
    """As `weft runner` does: an async activity is cancelled, a sync one cannot
    be (its thread would hold the interpreter open); either way the process
    exits at once with 1."""
    async with AsyncClient(embedded.address) as client:
        await started(client, await start(client), {"value": 1, "hold": 60, "sync": sync})
    proc = embedded.proc
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    await wait_until(lambda: _now('"worker.draining"' in embedded.log_path.read_text()))
    proc.send_signal(signal.SIGTERM)  # (the activity has 30 s of grace left)
    assert await asyncio.to_thread(proc.wait, 15) == 1, embedded.log_tail()
    # (the count includes lanes still waiting in a folded poll, which a quick
    # second signal also cuts short)
    assert re.search(
        r"weft server: [1-9]\d* embedded task\(s\) abandoned at the stop",
        embedded.log_path.read_text(),
    )


async def test_sigterm_while_the_workers_poll_exits_cleanly(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:

        async def polled() -> bool:
            kinds = (c.TASK_LIST_KIND_DECISION, c.TASK_LIST_KIND_ACTIVITY)
            for kind in kinds:
                resp = await client.rpc(
                    "DescribeTaskList",
                    s.DescribeTaskListRequest(namespace="default", task_list="embedded", kind=kind),
                )
                if not resp.pollers:
                    return False
            return True

        await wait_until(polled)
    assert await embedded.terminate() == 0, embedded.log_tail()


async def test_workers_2_run_embedded_workers_and_drain_on_a_group_signal(
    postgres_url: str, tmp_path: Path
) -> None:
    extra = ("--workers", "2", "--embed", FLOW, "--embed-concurrency", "4")
    node = ServerProcess(postgres_url, tmp_path, name="embedded-workers", extra_args=extra)
    await node.start()
    try:
        async with AsyncClient(node.address) as client:
            ids = [await start(client) for _ in range(4)]
            for n, workflow_id in enumerate(ids):
                await client.signal(workflow_id, "go", {"value": n})
            for n, workflow_id in enumerate(ids):
                assert await client.result(workflow_id, timeout=RESULT_WAIT) == {"stamped": n}

            def worker_lines() -> list[str]:
                lines = node.log_path.read_text().splitlines()
                return [line for line in lines if '"worker.started"' in line]

            await wait_until(lambda: _now(len(worker_lines()) == 4))  # a decider, a runner each
            assert all('"concurrency": 4' in line for line in worker_lines()), worker_lines()

            # A terminal's Ctrl-C reaches the supervisor and its processes at
            # once, and the supervisor passes it on: not a second signal.
            held = await start(client)
            await started(client, held, {"value": "held", "hold": 3})
            assert node.proc is not None
            signalled = datetime.now(UTC)
            os.killpg(node.proc.pid, signal.SIGINT)
            assert await asyncio.to_thread(node.proc.wait, 60) == 0, node.log_tail()
            await node.start()
            successes = await events(client, held, "ActivitySuccess")
        assert [e.get("result") for e in successes] == [{"stamped": "held"}]
        assert successes[0].timestamp > signalled, "nothing was in flight at the stop"
    finally:
        node.stop()


async def _now(value: bool) -> bool:
    return value


def _session_noted(db_url: str, run_id: str) -> bool:
    """The node has written which worker session started the run (`worker_runs`)."""
    query = "SELECT 1 FROM worker_runs WHERE run_id = {}"
    if db_url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            return conn.execute(query.format("?"), (run_id,)).fetchone() is not None
    with psycopg.connect(db_url) as pg:
        return pg.execute(query.format("%s"), (run_id,)).fetchone() is not None


def refused(tmp_path: Path, *args: str, db_url: str = "") -> str:
    """`weft server ARGS` that must refuse to start: exit 2, one line on stderr,
    and (on SQLite) no database file made."""
    db = tmp_path / "never.db"
    done = raw_weft("server", "--db", db_url or f"sqlite:///{db}", "--listen", _loopback(), *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not db.exists(), "the database was opened before the refusal"
    return lines[0]


def _loopback() -> str:
    return f"127.0.0.1:{free_port()}"


def test_a_module_with_nothing_to_run_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "nothing_here.py"
    empty.write_text("X = 1\n")
    line = refused(tmp_path, "--embed", str(empty))
    assert line.startswith("weft server: --embed: no Decider subclasses, @activity"), line


def test_a_module_that_does_not_load_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--embed", "no_such_module_anywhere")
    assert line.startswith("weft server: --embed: cannot import no_such_module_anywhere"), line


def test_a_module_that_does_not_load_is_refused_by_a_supervisor(
    postgres_url: str, tmp_path: Path
) -> None:
    args = ("--workers", "2", "--embed", "no_such_module_anywhere")
    line = refused(tmp_path, *args, db_url=postgres_url)
    assert line.startswith("weft server: --embed: cannot import no_such_module_anywhere"), line


async def test_under_auth_the_embedded_workers_run_as_a_worker_of_their_lists(
    db_url: str, tmp_path: Path
) -> None:
    await _runs_under_auth(db_url, tmp_path, (), processes=1)


async def test_under_auth_each_process_of_workers_2_admits_its_embedded_workers(
    postgres_url: str, tmp_path: Path
) -> None:
    await _runs_under_auth(postgres_url, tmp_path, ("--workers", "2"), runs=4, processes=2)


async def _runs_under_auth(
    db_url: str, tmp_path: Path, extra: tuple[str, ...], processes: int, runs: int = 1
) -> None:
    """`--embed` with `--auth`: a caller without a key is refused; with the
    bootstrapped admin key, runs complete on the embedded workers, whose events
    carry their principal, and the signals the key's."""
    args = ("--embed", FLOW, "--auth", *extra)
    proc = ServerProcess(db_url, tmp_path, name="embedded-auth", extra_args=args)
    await proc.start()
    try:
        boot = await asyncio.to_thread(raw_weft, "auth", "bootstrap", "--db", db_url)
        assert boot.returncode == 0, boot.stderr
        async with AsyncClient(proc.address) as anonymous:
            with pytest.raises(UnauthenticatedError):
                await start(anonymous)
        async with AsyncClient(proc.address, api_key=boot.stdout.strip()) as client:
            ids = [await start(client) for _ in range(runs)]
            for n, workflow_id in enumerate(ids):
                await client.signal(workflow_id, "go", {"value": n})
            histories = []
            for n, workflow_id in enumerate(ids):
                assert await client.result(workflow_id, timeout=RESULT_WAIT) == {"stamped": n}
                histories.append(await client.history(workflow_id))
        # Each worker of each process opened its session (an authenticated call):
        # none of them was refused, in no process.
        log = proc.log_path.read_text()
        assert log.count('"worker.session_opened"') >= 2 * processes, log[-2000:]
        refused = ('"embedded.failed"', '"worker.session_failed"', "Traceback")
        assert not any(line in log for line in refused), log[-2000:]
    finally:
        proc.stop()
    embedded = f"embedded:{socket.gethostname()}"
    for history in histories:
        by_type = {e.type: e.principal for e in history}
        assert by_type["Signal"].startswith("key:"), by_type
        for kind in ("DeciderStarted", "DeciderCompleted", "ActivityStarted", "ActivitySuccess"):
            assert by_type[kind] == embedded, by_type


async def test_embedded_definitions_are_registered_and_run_in_the_process(
    db_url: str, tmp_path: Path
) -> None:
    args = ("--embed", FLOW, "--embed-definitions", str(STEPS))
    proc = ServerProcess(db_url, tmp_path, name="embedded-steps", extra_args=args)
    await proc.start()
    try:
        async with AsyncClient(proc.address) as client:
            # No task list given: the one the definition was registered with.
            run = await client.start_workflow("embedded-steps", {"value": 5})
            assert await client.result(run.workflow_id, timeout=RESULT_WAIT) == 5
            history = await client.history(run.workflow_id)
    finally:
        proc.stop()
    deciders = [e.get("identity") for e in history if e.type == "DeciderStarted"]
    runners = [e.get("identity") for e in history if e.type == "ActivityStarted"]
    assert deciders and all(str(i).endswith("/decider") for i in deciders), deciders
    assert runners and all(str(i).endswith("/runner") for i in runners), runners


def test_definitions_alone_make_a_decider_only(tmp_path: Path) -> None:
    services = Server(ServerConfig(db_url=f"sqlite:///{tmp_path}/w.db")).in_process()
    twice = (str(STEPS), f"{STEPS}/")  # (one folder given twice is read once)
    workers = build_embedded((), services, "default", None, twice)
    assert [(w.kind, w.task_lists) for w in workers.workers] == [("decision", ["embedded"])]


def test_a_folder_of_definitions_that_is_not_one_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--embed-definitions", str(tmp_path / "missing"))
    assert line == f"weft server: --embed-definitions {tmp_path / 'missing'}: not a directory"


def test_a_definition_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "broken.yaml").write_text("name: broken\nsteps: [{step: no-such-step}]\n")
    line = refused(tmp_path, "--embed-definitions", str(folder))
    assert line.startswith(f"weft server: --embed-definitions: {folder / 'broken.yaml'}:"), line


def test_a_concurrency_without_embed_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--embed-concurrency", "4")
    assert line == "weft server: --embed-concurrency needs --embed or --embed-definitions", line


async def test_a_worker_that_fails_at_its_start_stops_the_server(tmp_path: Path) -> None:
    module = tmp_path / "long_type.py"
    module.write_text(
        "from sdk import Decider\n\n\n"
        "class TooLong(Decider):\n"
        f"    workflow_type = {'x' * 300!r}\n"
        "    task_list = 'embedded'\n\n"
        "    def decide(self, task):\n"
        "        pass\n"
    )
    # Not `ServerProcess.start`: the process may be gone before a health check.
    log = tmp_path / "failing.log"
    args = ["server", "--db", f"sqlite:///{tmp_path}/w.db", "--listen", _loopback()]
    proc = spawn([str(WEFT), *args, "--embed", str(module)], log, cwd=None)
    try:
        assert await asyncio.to_thread(proc.wait, 30) == 1, log.read_text()
        assert "weft server: an embedded worker stopped:" in log.read_text()
        # Its health check never said SERVING: the worker had ended before.
        assert '"serving": false' in log.read_text(), log.read_text()
    finally:
        stop(proc)


async def test_modules_load_once_and_unnamed_activities_poll_the_deciders_lists(
    tmp_path: Path,
) -> None:
    imports = tmp_path / "imports.txt"
    module = tmp_path / "unnamed_flow.py"
    module.write_text(UNNAMED_FLOW.replace("IMPORTS", repr(str(imports))))
    db = f"sqlite:///{tmp_path}/w.db"
    # The same path twice, and a decider and a runner built from it: one import.
    extra = ("--embed", str(module), "--embed", str(module))
    node = ServerProcess(db, tmp_path, name="unnamed", extra_args=extra)
    await node.start()
    try:
        async with AsyncClient(node.address) as client:
            run = await client.start_workflow("unnamed-flow", None, task_list="unnamed")
            result = await client.result(run.workflow_id, timeout=RESULT_WAIT)
        assert result == "done"
        assert imports.read_text().splitlines() == ["imported"]
    finally:
        node.stop()


UNNAMED_FLOW = """
from sdk import Decider, activity

with open(IMPORTS, "a") as out:
    out.write("imported" + chr(10))


@activity(name="unnamed-work")  # no task list: it runs on its workflow's
async def work(item):
    return "done"


class Unnamed(Decider):
    workflow_type = "unnamed-flow"
    task_list = "unnamed"
    blocking = False

    def decide(self, task):
        act = task.activities.get("w")
        if act is None:
            task.schedule_activity("w", work, None)
        elif act.status == "succeeded":
            task.complete(act.result)
"""


def test_a_module_with_a_space_is_refused_by_a_supervisor(
    postgres_url: str, tmp_path: Path
) -> None:
    line = refused(tmp_path, "--workers", "2", "--embed", "my flows.py", db_url=postgres_url)
    assert "with --workers, a module or folder may not hold spaces" in line, line


def test_a_folder_with_a_space_is_refused_by_a_supervisor(
    postgres_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "my flows"
    folder.mkdir()
    args = ("--workers", "2", "--embed-definitions", str(folder))
    line = refused(tmp_path, *args, db_url=postgres_url)
    assert "with --workers, a module or folder may not hold spaces" in line, line
