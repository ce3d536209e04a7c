"""A relay to PostgreSQL that holds back each ReadyForQuery that follows an
ErrorResponse for 0.3 s: the end of a failed call's exchange, slow to come.

Armed (`cutting_proxy`), it also cuts the first connection whose server ends a
batch of at least N commands (a pipeline's N calls, then its Sync): the client
has its rows but never the ReadyForQuery, and its connection is gone. For a
pipeline whose calls all went through, PostgreSQL committed before it sent
that ReadyForQuery: a commit whose outcome the client cannot know.

Run as a process of its own (`python -m tests.pg_proxy HOST PORT`, which prints
the port it listens on; a line "arm N" on its stdin arms it), so that a client
blocked in libpq cannot stop it. It ends when its stdin does (its parent gone).
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
def cutting_proxy(upstream: tuple[str, int]) -> Iterator[tuple[int, Callable[[int], None]]]:
    """The port of a proxy process to `upstream`, and what arms its one cut
    (`arm(n)`: at the end of a batch of at least n commands)."""
    with _proxy(upstream) as (port, proc):

        def arm(commands: int) -> None:
            assert proc.stdin is not None
            proc.stdin.write(f"arm {commands}\n")
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
    """The one cut: at the end of a batch of at least `at` commands (0: not
    armed, or made)."""

    at = 0


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
            if head[:1] == b"Z" and _Cut.at and commands >= _Cut.at:
                _Cut.at = 0
                break  # (the ReadyForQuery not sent: both sides are closed below)
            if head[:1] == b"Z":
                commands = 0
            elif head[:1] == b"C":  # CommandComplete
                commands += 1
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
        word, _, commands = line.partition(" ")
        if word == "arm":
            _Cut.at = int(commands)
            print("armed", flush=True)
    server.close()  # stdin ended: the test that ran it is gone


if __name__ == "__main__":
    asyncio.run(_serve((sys.argv[1], int(sys.argv[2]))))
