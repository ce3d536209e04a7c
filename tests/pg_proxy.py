"""A relay to PostgreSQL that holds back each ReadyForQuery that follows an
ErrorResponse for 0.3 s: the end of a failed call's exchange, slow to come.

Armed (`cutting_proxy`), it also cuts the first connection whose server ends a
batch of two or more commands (a pipeline's calls, then its Sync): the
transaction is committed, the client has its rows but never the
ReadyForQuery, and its connection is gone. A commit whose outcome the client
cannot know.

Run as a process of its own (`python -m tests.pg_proxy HOST PORT`, which prints
the port it listens on; a line "arm" on its stdin arms it), so that a client
blocked in libpq cannot stop it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

HOLD = 0.3  # seconds


@contextmanager
def holding_proxy(upstream: tuple[str, int]) -> Iterator[int]:
    """The port of a proxy process to `upstream`, for the block's length."""
    with _proxy(upstream) as (port, _):
        yield port


@contextmanager
def cutting_proxy(upstream: tuple[str, int]) -> Iterator[tuple[int, Callable[[], None]]]:
    """The port of a proxy process to `upstream`, and what arms its one cut."""
    with _proxy(upstream) as (port, proc):

        def arm() -> None:
            assert proc.stdin is not None
            proc.stdin.write("arm\n")
            proc.stdin.flush()
            assert proc.stdout is not None
            assert proc.stdout.readline() == "armed\n"

        yield port, arm


@contextmanager
def _proxy(upstream: tuple[str, int]) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.pg_proxy", upstream[0], str(upstream[1])],
        cwd=Path(__file__).resolve().parent.parent,  # (where `tests` is a package)
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline()), proc
    finally:
        proc.kill()
        proc.wait(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


class _Cut:
    """Whether the one cut is armed (and not yet made)."""

    armed = False


async def _relay(
    upstream: tuple[str, int], client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
) -> None:
    server_in, server_out = await asyncio.open_connection(*upstream)

    async def up() -> None:
        while data := await client_in.read(65536):
            server_out.write(data)
            await server_out.drain()
        server_out.close()

    async def down() -> None:
        after_error = False
        commands = 0  # since the last ReadyForQuery
        while True:
            try:
                head = await server_in.readexactly(5)  # type byte, then int32 length
            except asyncio.IncompleteReadError:
                break
            body = await server_in.readexactly(int.from_bytes(head[1:], "big") - 4)
            if head[:1] == b"Z" and after_error:
                await asyncio.sleep(HOLD)
            if head[:1] == b"Z" and commands >= 2 and _Cut.armed:
                _Cut.armed = False
                break  # (the ReadyForQuery not sent: both sides are closed below)
            commands = 0 if head[:1] == b"Z" else commands + (head[:1] == b"C")
            after_error = head[:1] == b"E"
            client_out.write(head + body)
            await client_out.drain()
        client_out.close()
        server_out.close()

    await asyncio.gather(up(), down(), return_exceptions=True)


async def _serve(upstream: tuple[str, int]) -> None:
    server = await asyncio.start_server(lambda r, w: _relay(upstream, r, w), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if line.strip() == "arm":
            _Cut.armed = True
            print("armed", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve((sys.argv[1], int(sys.argv[2]))))
