"""The two stream servers `bench.lane_transports` compares each answer every
message with the message sent, and both sides' CPU is counted (a broken
transport fails here instead of printing a number)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench import echo, lane_transports
from bench.processes import free_port, python_module, wait_for_port


async def test_each_transport_echoes_every_message_and_both_sides_cpu_is_counted(
    tmp_path: Path,
) -> None:
    found = await lane_transports.compare(0.5, 1, (2,), tmp_path)
    assert set(found) == set(lane_transports.MODES)
    for mode, by_callers in found.items():
        [figures] = by_callers[2]
        assert figures.messages > 0, mode
        assert figures.server_ms > 0 and figures.caller_ms > 0, (mode, figures)


class _Mangling:
    """A caller whose server answers with something else than it was sent."""

    async def exchange(self, message: echo.Message) -> echo.Message:
        return echo.Message(workflow_id="not what was sent")

    async def close(self) -> None:
        pass


async def test_an_answer_that_is_not_the_message_sent_fails_the_load() -> None:
    with pytest.raises(AssertionError, match="not the message sent"):
        await lane_transports._loop(_Mangling(), echo.Message(workflow_id="w"), 0.0, at_least=1)


async def test_a_window_without_a_message_fails_instead_of_giving_a_figure(tmp_path: Path) -> None:
    port = free_port()
    server = python_module(
        "lane", "bench.lane_transports", ["serve", "asyncio", str(port)], tmp_path
    )
    server.start()
    try:
        wait_for_port(port)
        with pytest.raises(AssertionError, match="no message came back"):
            await lane_transports.load("asyncio", port, 1, 0.0, server.cpu)
    finally:
        server.stop()


async def test_a_server_that_stops_answering_fails_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # (takes the call, answers nothing, until the caller goes)
        writer.close()

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setattr(lane_transports, "ANSWER_WAIT", 0.5)
    try:
        with pytest.raises(AssertionError, match=r"no answer within 0\.5 s"):
            await lane_transports.load("asyncio", port, 1, 1.0, lambda: 0.0)
    finally:
        server.close()
        await server.wait_closed()


def test_an_unknown_transport_is_refused() -> None:
    with pytest.raises(SystemExit, match="no mode 'quic'"):
        lane_transports.serve("quic", 0)


async def test_a_paced_load_keeps_to_its_rate(tmp_path: Path) -> None:
    # (an upper bound only: a slow machine may fall below the pace, never above)
    found = await lane_transports.compare(1.0, 1, (2,), tmp_path, pace=100)
    for mode, by_callers in found.items():
        [figures] = by_callers[2]
        assert 0 < figures.messages <= 100 * figures.seconds + 2, (mode, figures)
