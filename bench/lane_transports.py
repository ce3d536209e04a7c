"""`python -m bench.lane_transports`: what a lane's message costs over grpc.aio
against a bare asyncio stream.

    .venv/bin/python -m bench.lane_transports                 # 4 and 16 callers, 4 s, twice
    .venv/bin/python -m bench.lane_transports --seconds 2 --rounds 1
    .venv/bin/python -m bench.lane_transports --pace 1000   # at about the rate of Weft's lanes

A lane (`orchestrator/api/lanes.py`) is a gRPC stream on which a worker writes
a call and reads its answer, one at a time. Each caller here holds a stream of
its own and does the same with the bare echo's message: write it, read it back.
Two servers of that stream, each a process of its own started in turn:

- `grpc`: grpc.aio, a stream-stream method answered with `context.read()` and
  `context.write()`, as `Lanes._serve` answers;
- `asyncio`: `asyncio.start_server`, each message framed by its length (four
  bytes, big-endian), read and written with asyncio's streams. No TLS and no
  HTTP/2: the least a stream of protobuf messages can cost in this Python.

It prints each one's CPU per message, the server's and the caller's (this
process, which does nothing else meanwhile), one value per round. Plaintext on
loopback only: a transport that could replace the lanes' would need TLS too.

`python -m bench.lane_transports serve MODE PORT` is one of the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from bench import echo
from bench.processes import free_port, module_serving

MODES = ("grpc", "asyncio")
_SERVICE, _NAME = "bench.Lane", "Exchange"
_LENGTH = struct.Struct(">I")


async def _serve_grpc(port: int) -> None:
    async def exchange(
        requests: AsyncIterator[echo.Message],
        context: grpc.aio.ServicerContext[Any, echo.Message],  # (read: a message or EOF)
    ) -> None:
        while (message := await context.read()) is not grpc.aio.EOF:
            await context.write(message)

    handler = grpc.stream_stream_rpc_method_handler(
        exchange,
        request_deserializer=echo.Message.FromString,
        response_serializer=echo.Message.SerializeToString,
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE, {_NAME: handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def _read_frame(reader: asyncio.StreamReader) -> echo.Message:
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return echo.Message.FromString(await reader.readexactly(size))


def _frame(message: echo.Message) -> bytes:
    body = message.SerializeToString()
    return _LENGTH.pack(len(body)) + body


async def _serve_asyncio(port: int) -> None:
    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(_frame(await _read_frame(reader)))
        except asyncio.IncompleteReadError:  # (the caller hung up)
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", port)
    await server.serve_forever()


def serve(mode: str, port: int) -> None:
    """One stream server of `mode` on 127.0.0.1:PORT, until the process is stopped."""
    if mode not in MODES:
        raise SystemExit(f"bench.lane_transports: no mode {mode!r} (one of {', '.join(MODES)})")
    asyncio.run(_serve_grpc(port) if mode == "grpc" else _serve_asyncio(port))


class Caller(Protocol):
    """One stream to the server: `exchange` writes a message and reads its answer."""

    async def exchange(self, message: echo.Message) -> echo.Message: ...

    async def close(self) -> None: ...


class _GrpcCaller:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        method = channel.stream_stream(
            f"/{_SERVICE}/{_NAME}",
            request_serializer=echo.Message.SerializeToString,
            response_deserializer=echo.Message.FromString,
        )
        self._call = method()

    async def exchange(self, message: echo.Message) -> echo.Message:
        await self._call.write(message)
        answer = await self._call.read()
        if not isinstance(answer, echo.Message):
            raise AssertionError("grpc: the stream ended instead of answering")
        return answer

    async def close(self) -> None:
        await self._call.done_writing()


class _AsyncioCaller:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def exchange(self, message: echo.Message) -> echo.Message:
        self._writer.write(_frame(message))
        return await _read_frame(self._reader)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


@dataclass(frozen=True)
class Figures:
    messages: int
    seconds: float
    server_cpu_s: float
    caller_cpu_s: float

    @property
    def server_ms(self) -> float:
        return 1000 * self.server_cpu_s / self.messages

    @property
    def caller_ms(self) -> float:
        return 1000 * self.caller_cpu_s / self.messages


def _own_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


async def load(
    mode: str,
    port: int,
    callers: int,
    seconds: float,
    server_cpu: Callable[[], float],
    pace: float = 0.0,
) -> Figures:
    """`callers` streams exchanging the echo's message for `seconds` (after a
    warm-up of a second at most), `pace` messages a second between them (0:
    flat out); `server_cpu()` reads the server's CPU seconds."""
    every = callers / pace if pace > 0 else 0.0
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}") if mode == "grpc" else None
    streams: list[Caller] = []
    try:
        for _ in range(callers):
            if channel is not None:
                streams.append(_GrpcCaller(channel))
            else:
                streams.append(_AsyncioCaller(*await asyncio.open_connection("127.0.0.1", port)))
        sent = echo.Message(workflow_id="bench-lane", run_id="0" * 32)
        for stream in streams:  # (each one open and answering before the window)
            await _loop(stream, sent, 0.0, at_least=1)
        warm_until = time.monotonic() + min(1.0, seconds)
        await asyncio.gather(
            *(
                _loop(s, sent, warm_until, every=every, phase=i / callers)
                for i, s in enumerate(streams)
            )
        )
        server0, caller0, start = server_cpu(), _own_cpu(), time.monotonic()
        counts = await asyncio.gather(
            *(
                _loop(s, sent, start + seconds, every=every, phase=i / callers)
                for i, s in enumerate(streams)
            )
        )
        elapsed = time.monotonic() - start
        figures = Figures(sum(counts), elapsed, server_cpu() - server0, _own_cpu() - caller0)
    finally:
        await asyncio.gather(*(s.close() for s in streams), return_exceptions=True)
        if channel is not None:
            await channel.close()
    if figures.messages == 0:
        raise AssertionError(f"{mode}: no message came back in {seconds} s")
    return figures


ANSWER_WAIT = 10.0
"""Seconds a caller waits for an answer before the load fails (a server that
stops answering would otherwise hold the bench for ever)."""


async def _loop(
    stream: Caller,
    sent: echo.Message,
    until: float,
    at_least: int = 0,
    every: float = 0.0,
    phase: float = 0.0,
) -> int:
    """Exchange `sent` on `stream` until `until` (and `at_least` times), one
    each `every` seconds at most (0: flat out), starting `phase` of a period
    late (so that paced callers take turns, as separate workers do, instead of
    arriving together): how many."""
    done = 0
    due = time.monotonic() + phase * every
    while done < at_least or time.monotonic() < until:
        if every:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            due += every
        try:
            async with asyncio.timeout(ANSWER_WAIT):
                answer = await stream.exchange(sent)
        except TimeoutError:
            raise AssertionError(f"no answer within {ANSWER_WAIT} s") from None
        if answer != sent:
            raise AssertionError("the answer is not the message sent")
        done += 1
    return done


async def compare(
    seconds: float, rounds: int, callers: tuple[int, ...], log_dir: Path, pace: float = 0.0
) -> dict[str, dict[int, list[Figures]]]:
    """Each mode's figures by callers, one per round, the modes taking turns."""
    out: dict[str, dict[int, list[Figures]]] = {m: {n: [] for n in callers} for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            port = free_port()
            args = ["serve", mode, str(port)]
            with module_serving(
                f"lane-{mode}", "bench.lane_transports", args, port, log_dir
            ) as server:
                for n in callers:
                    out[mode][n].append(await load(mode, port, n, seconds, server.cpu, pace))
    return out


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"]:
        serve(argv[1], int(argv[2]))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.lane_transports")
    parser.add_argument("--seconds", type=float, default=4.0, help="counted seconds per load")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--pace", type=float, default=0.0, help="messages a second, all callers (0: flat out)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="weft-lanes-") as tmp:
        found = asyncio.run(compare(args.seconds, args.rounds, (4, 16), Path(tmp), args.pace))
    print(
        "CPU per message on a stream (written, answered, read), ms: server | caller; one per round"
    )
    for mode, by_callers in found.items():
        for n, rounds in by_callers.items():
            server = " / ".join(f"{f.server_ms:.3f}" for f in rounds)
            caller = " / ".join(f"{f.caller_ms:.3f}" for f in rounds)
            rate = " / ".join(f"{f.messages / f.seconds:.0f}" for f in rounds)
            print(f"  {mode:<8} {n:>2} callers: {server} | {caller}   ({rate} a second)")


if __name__ == "__main__":
    main(sys.argv[1:])
