"""`sdk.event_loops`: which loop a Weft process runs on. The argument, then
`WEFT_EVENT_LOOP`, then asyncio's own (`weft server` passes "auto"); "auto"
is uvloop where it imports, asyncio's loop where it does not; uvloop asked for
by name where it does not import is a ValueError, as an unknown name is,
raised before anything runs."""

from __future__ import annotations

import asyncio
import sys

import pytest

from sdk import ActivityWorker, AsyncClient
from sdk.event_loops import EVENT_LOOP_ENV, chosen, loop_factory, running


@pytest.fixture(autouse=True)
def no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)


def loop_of(event_loop: str | None) -> str:
    """The loop a coroutine runs on when run as the choice says."""

    async def which() -> str:
        return running()

    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(which())


def test_the_argument_then_the_environment_then_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    assert chosen() == "asyncio"
    monkeypatch.setenv(EVENT_LOOP_ENV, "auto")
    assert chosen() == "auto"
    assert chosen("uvloop") == "uvloop"
    monkeypatch.setenv(EVENT_LOOP_ENV, "")
    assert chosen() == "asyncio"


def test_an_unknown_loop_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match=r"^event_loop must be one of auto, uvloop, asyncio"):
        chosen("trio")
    monkeypatch.setenv(EVENT_LOOP_ENV, "Trio")
    with pytest.raises(ValueError, match=f"^{EVENT_LOOP_ENV} must be one of .*'Trio'"):
        loop_factory()


def test_auto_and_uvloop_run_on_uvloop_and_asyncio_on_asyncios_own() -> None:
    assert loop_of(None) == "asyncio"
    assert loop_of("auto") == "uvloop"
    assert loop_of("uvloop") == "uvloop"
    assert loop_factory("asyncio") is None
    assert loop_of("asyncio") == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_by_name_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # (its import now fails)
    assert loop_factory("auto") is None
    assert loop_of("auto") == "asyncio"
    with pytest.raises(ValueError, match="uvloop event loop is not installed"):
        loop_factory("uvloop")


async def test_a_worker_refuses_an_unknown_loop_before_it_runs() -> None:
    async with AsyncClient("127.0.0.1:1") as client:  # (never called)
        worker = ActivityWorker(client, task_lists=["t"], activities=[])
        with pytest.raises(ValueError, match="not 'trio'"):
            await asyncio.to_thread(worker.run, event_loop="trio")
        assert not worker.started
