"""A relay to PostgreSQL that holds back each ReadyForQuery that follows an
ErrorResponse for 0.3 s: the end of a failed call's exchange, slow to come.

Run as a process of its own (`python -m tests.pg_proxy HOST PORT`, which prints
the port it listens on), so that a client blocked in libpq cannot stop it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOLD = 0.3  # seconds


@contextmanager
def holding_proxy(upstream: tuple[str, int]) -> Iterator[int]:
    """The port of a proxy process to `upstream`, for the block's length."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.pg_proxy", upstream[0], str(upstream[1])],
        cwd=Path(__file__).resolve().parent.parent,  # (where `tests` is a package)
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


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
        while True:
            try:
                head = await server_in.readexactly(5)  # type byte, then int32 length
            except asyncio.IncompleteReadError:
                break
            body = await server_in.readexactly(int.from_bytes(head[1:], "big") - 4)
            if head[:1] == b"Z" and after_error:
                await asyncio.sleep(HOLD)
            after_error = head[:1] == b"E"
            client_out.write(head + body)
            await client_out.drain()
        client_out.close()

    await asyncio.gather(up(), down(), return_exceptions=True)


async def _serve(upstream: tuple[str, int]) -> None:
    server = await asyncio.start_server(lambda r, w: _relay(upstream, r, w), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve((sys.argv[1], int(sys.argv[2]))))
