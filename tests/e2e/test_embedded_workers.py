"""`weft server --embed MODULE`: the module's decider and runner inside the
server's process, calling the node without gRPC. Real `weft server` processes on
both databases, driven over gRPC by the SDK like any other node:

- a workflow runs to its end with no worker process, its tasks taken by the
  embedded workers (their identities in the history);
- a signal acknowledged before a kill -9 of the process is there after the
  restart, and the run completes;
- SIGTERM lets an activity in flight finish and record its result first; a
  second SIGTERM does not wait for it;
- modules that hold nothing to run, do not load, or come with `--auth` are one
  line and exit 2, before the database is opened.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk import AsyncClient
from tests.cli.support import REPO, clean_env
from tests.helpers import unique, wait_until
from tests.serverproc import WEFT, ServerProcess, free_port

FLOW = str(Path(__file__).with_name("embedded_flow.py"))
WORKFLOW = "embedded-stamp"


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


async def identities(client: AsyncClient, workflow_id: str, kind: str) -> list[Any]:
    return [e.get("identity") for e in await client.history(workflow_id) if e.type == kind]


async def test_a_workflow_runs_on_the_embedded_workers(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        await client.signal(workflow_id, "go", {"value": 7})
        result = await client.result(workflow_id, timeout=timedelta(seconds=30))
        assert result == {"stamped": 7}
        deciders = await identities(client, workflow_id, "DeciderStarted")
        runners = await identities(client, workflow_id, "ActivityStarted")
    assert deciders and all(str(i).endswith("/decider") for i in deciders), deciders
    assert runners and all(str(i).endswith("/runner") for i in runners), runners


async def test_a_signal_acknowledged_before_kill_9_survives_it(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        # The activity holds long enough that the kill lands while it runs or
        # before: either way the signal's answer came after its commit.
        await client.signal(workflow_id, "go", {"value": "kept", "hold": 0.5})
        embedded.kill9()
        await embedded.start()
        # A task the killed process had started comes back at its timeout, and
        # an activity attempt lost so is scheduled again (embedded_flow).
        result = await client.result(workflow_id, timeout=timedelta(seconds=60))
        history = await client.history(workflow_id)
    assert result == {"stamped": "kept"}
    signals = [e for e in history if e.type == "Signal"]
    assert len(signals) == 1 and signals[0].get("input") == {"value": "kept", "hold": 0.5}


async def test_sigterm_lets_the_activity_in_flight_finish(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        await client.signal(workflow_id, "go", {"value": 1, "hold": 1.5})
        await wait_until(lambda: identities(client, workflow_id, "ActivityStarted"))
        assert await embedded.terminate() == 0, embedded.log_tail()
        await embedded.start()
        successes = [e for e in await client.history(workflow_id) if e.type == "ActivitySuccess"]
        assert len(successes) == 1, "the activity's result was not recorded before the exit"
        assert successes[0].get("result") == {"stamped": 1}
        assert await client.result(workflow_id, timeout=timedelta(seconds=30)) == {"stamped": 1}


def refused(tmp_path: Path, *args: str) -> str:
    """`weft server ARGS` that must refuse to start: exit 2, one line on stderr,
    and no database file made."""
    db = tmp_path / "never.db"
    done = subprocess.run(
        [WEFT, "server", "--db", f"sqlite:///{db}", "--listen", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not db.exists(), "the database was opened before the refusal"
    return lines[0]


def test_a_module_with_nothing_to_run_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "nothing_here.py"
    empty.write_text("X = 1\n")
    line = refused(tmp_path, "--embed", str(empty))
    assert line.startswith("weft server: --embed: no Decider subclasses or @activity"), line


def test_a_module_that_does_not_load_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--embed", "no_such_module_anywhere")
    assert line.startswith("weft server: --embed: cannot import no_such_module_anywhere"), line


def test_embed_with_auth_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--embed", FLOW, "--auth")
    assert "--embed cannot be used with --auth" in line, line


async def test_a_second_sigterm_does_not_wait_for_the_activity(embedded: ServerProcess) -> None:
    async with AsyncClient(embedded.address) as client:
        workflow_id = await start(client)
        await client.signal(workflow_id, "go", {"value": 1, "hold": 60})
        await wait_until(lambda: identities(client, workflow_id, "ActivityStarted"))
    proc = embedded.proc
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)  # draining: the activity has 30 s of grace
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 15) == 0, embedded.log_tail()


async def test_sigterm_before_any_work_exits_cleanly(embedded: ServerProcess) -> None:
    await asyncio.sleep(0.2)  # the workers' first polls are waiting
    assert await embedded.terminate() == 0, embedded.log_tail()


async def test_each_process_of_workers_2_runs_its_own_embedded_workers(
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
                assert await client.result(workflow_id, timeout=timedelta(seconds=30)) == {
                    "stamped": n
                }

        def started() -> list[str]:
            lines = node.log_path.read_text().splitlines()
            return [line for line in lines if '"worker.started"' in line]

        await wait_until(lambda: _now(len(started()) == 4))  # a decider and a runner each
        assert all('"concurrency": 4' in line for line in started()), started()
        assert await node.terminate() == 0, node.log_tail()
    finally:
        node.stop()


async def _now(value: bool) -> bool:
    return value
