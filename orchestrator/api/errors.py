"""Domain errors -> gRPC status codes, in one place."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from orchestrator.engine.errors import EngineError

log = structlog.get_logger("weft.api")
R = TypeVar("R")


def grpc_errors(
    method: Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[R]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[R]]:
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> R:
        try:
            return await method(self, request, context)
        except EngineError as exc:
            code = getattr(grpc.StatusCode, exc.code_name)
            log.info("rpc.refused", rpc=method.__name__, code=exc.code_name, reason=str(exc))
            await context.abort(code, str(exc))
            raise  # abort raises; this line is for the type checker

    return wrapper
