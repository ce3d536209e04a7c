"""`python -m bench.fronts`: what a gRPC server outside asyncio would save Weft.

    .venv/bin/python -m bench.fronts                 # 4 and 16 callers, 5 s, twice
    .venv/bin/python -m bench.fronts --seconds 2 --rounds 1

Runs the bare echo load (`bench.echo.load`) against three servers of the same
unary method, each a process of its own started in turn, and prints each one's
CPU per call:

- `aio`: grpc.aio, as `weft server` and `bench.echo` serve;
- `threads`: grpc's thread-pool server, the handler answering in its thread;
- `threads+loop`: the thread-pool server handing each call to an asyncio loop
  in another thread and waiting for its answer. That is what Weft's server,
  asyncio through and through (store, dispatch, wake-ups), would do behind a
  thread-pool front.

`python -m bench.fronts serve MODE PORT` is one of the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path

import grpc

from bench import echo
from bench.processes import free_port, module_serving

MODES = ("aio", "threads", "threads+loop")
_THREADS = 64  # more than the callers, so no call waits for a thread


def serve(mode: str, port: int) -> None:
    """One echo server of `mode` on 127.0.0.1:PORT, until the process is stopped."""
    if mode == "aio":
        asyncio.run(echo.serve(port))
        return
    if mode not in MODES:
        raise SystemExit(f"bench.fronts: no mode {mode!r} (one of {', '.join(MODES)})")
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def answer(request: echo.Message) -> echo.Message:
        return request

    def handle(request: echo.Message, context: grpc.ServicerContext) -> echo.Message:
        if mode == "threads":
            return request
        return asyncio.run_coroutine_threadsafe(answer(request), loop).result()

    service, name = echo.METHOD.strip("/").split("/")
    handler = grpc.unary_unary_rpc_method_handler(
        handle,
        request_deserializer=echo.Message.FromString,
        response_serializer=echo.Message.SerializeToString,
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=_THREADS))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {name: handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


async def compare(
    seconds: float,
    rounds: int,
    callers: tuple[int, ...],
    log_dir: Path,
    modes: tuple[str, ...] = MODES,
) -> dict[str, dict[int, list[float]]]:
    """Server CPU per call (ms) by mode and callers, one value per round."""
    out: dict[str, dict[int, list[float]]] = {m: {n: [] for n in callers} for m in modes}
    for _ in range(rounds):
        for mode in modes:
            port = free_port()
            args = ["serve", mode, str(port)]
            with module_serving(f"front-{mode}", "bench.fronts", args, port, log_dir) as server:
                for n in callers:
                    result = await echo.load(
                        f"127.0.0.1:{port}", n, seconds, min(1.0, seconds), server.cpu
                    )
                    out[mode][n].append(result.server_cpu_per_call_ms)
    return out


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"]:
        serve(argv[1], int(argv[2]))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.fronts")
    parser.add_argument("--seconds", type=float, default=5.0, help="counted seconds per load")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    callers = (4, 16)
    with tempfile.TemporaryDirectory(prefix="weft-fronts-") as tmp:
        found = asyncio.run(compare(args.seconds, args.rounds, callers, Path(tmp)))
    print("server CPU per bare echo call, ms (one value per round)")
    for mode, by_callers in found.items():
        cells = "   ".join(
            f"{n} callers: " + " / ".join(f"{v:.3f}" for v in values)
            for n, values in by_callers.items()
        )
        print(f"  {mode:<13} {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
