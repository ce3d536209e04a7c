"""What a client calls when the server is in its own process (the workers
`weft server --embed MODULE` runs beside the node): `AsyncClient(in_process=…)`."""

from __future__ import annotations

from typing import Any, Protocol


class InProcess(Protocol):
    """A node's two services, called without gRPC: each a stub-like object whose
    methods take `(request, timeout=, metadata=)` and raise `grpc.aio.AioRpcError`,
    as a generated stub's do (`orchestrator.api.in_process.InProcessServices`)."""

    @property
    def workflow(self) -> Any: ...

    @property
    def admin(self) -> Any: ...
