"""The bare gRPC reference: a grpc.aio unary echo server (run as
`python -m bench.echo PORT`, a process of its own like `weft server`) and the
load that measures its rate, round trip and server CPU per call.

The message is a small protobuf of Weft's own (`WorkflowExecution`, two short
strings), so the echo pays for protobuf as Weft's calls do."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from bench.stats import percentile
from sdk.api.weft.v1 import common_pb2

METHOD = "/bench.Echo/Echo"
Message = common_pb2.WorkflowExecution
Behaviour = Callable[[Message, grpc.aio.ServicerContext[Message, Message]], Awaitable[Message]]


async def _echo(request: Message, context: grpc.aio.ServicerContext[Message, Message]) -> Message:
    return request


async def serve(port: int) -> None:
    await serve_method(port, METHOD, _echo)


async def serve_method(port: int, method: str, behaviour: Behaviour) -> None:
    """Serve one unary method of `Message` (`/SERVICE/NAME`) on 127.0.0.1:PORT
    until the process is stopped: the bench's reference servers."""
    service, name = method.strip("/").split("/")
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=Message.FromString,
        response_serializer=Message.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {name: handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


@dataclass(frozen=True)
class EchoResult:
    calls: int
    seconds: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float
    client_cpu_s: float
    """The calling process's CPU over the window: what bare calls cost a client."""

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    @property
    def server_cpu_per_call_ms(self) -> float:
        return self.server_cpu_s / self.calls * 1000 if self.calls else float("nan")

    @property
    def client_cpu_per_call_ms(self) -> float:
        return self.client_cpu_s / self.calls * 1000 if self.calls else float("nan")


async def load(
    address: str,
    concurrency: int,
    seconds: float,
    warmup: float,
    server_cpu: Callable[[], float],
) -> EchoResult:
    """`concurrency` callers in a loop for `warmup` (not counted) then `seconds`;
    `server_cpu()` and this process's CPU are sampled at the edges of the counted
    window (nothing else runs in this process meanwhile)."""
    request = Message(workflow_id="w" * 32, run_id="r" * 32)
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            METHOD,
            request_serializer=Message.SerializeToString,
            response_deserializer=Message.FromString,
        )
        await call(request, timeout=10)  # the connection is set up before timing
        start = time.perf_counter()
        measure_from = start + warmup
        stop_at = measure_from + seconds

        async def caller() -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= stop_at:
                    return
                await call(request, timeout=10)
                if t0 >= measure_from:
                    latencies.append(time.perf_counter() - t0)

        async def sample_cpu() -> tuple[float, float]:
            await asyncio.sleep(measure_from - time.perf_counter())
            before, client_before = server_cpu(), time.process_time()
            await asyncio.sleep(stop_at - time.perf_counter())
            return server_cpu() - before, time.process_time() - client_before

        sampler = asyncio.create_task(sample_cpu())
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        cpu, client_cpu = await sampler
    return EchoResult(
        calls=len(latencies),
        seconds=seconds,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        server_cpu_s=cpu,
        client_cpu_s=client_cpu,
    )


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
