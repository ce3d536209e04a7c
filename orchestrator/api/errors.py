"""Domain errors -> gRPC status codes, in one place."""

from __future__ import annotations

import asyncio
import functools
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from orchestrator.engine.errors import EngineError, InvalidArgument, RateLimited
from sdk.errors import RETRY_AFTER_METADATA

from . import validate
from .handlers import MalformedRequest

log = structlog.get_logger("weft.api")
R = TypeVar("R")


def grpc_errors(
    method: Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[R]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[R]]:
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> R:
        started = time.perf_counter()
        code = "OK"
        try:
            if isinstance(request, MalformedRequest):
                raise InvalidArgument(
                    f"the request is not a valid {request.message}: {request.error}"
                )
            validate.request(request, self._settings.limits)
            async with self.guard.admit(method.__name__, request, context):
                return await method(self, request, context)
        except EngineError as exc:
            code = exc.code_name
            log.info("rpc.refused", rpc=method.__name__, code=code, reason=str(exc))
            await context.abort(getattr(grpc.StatusCode, code), str(exc), _trailers(exc))
            raise  # abort raises; this line is for the type checker
        except asyncio.CancelledError:
            code = "CANCELLED"  # the client went away
            raise
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise  # a status set on purpose
            # A bug, not the caller's fault: INTERNAL with a reference to the
            # logged traceback, never grpc's UNKNOWN with Python's exception text.
            code = "INTERNAL"
            ref = uuid.uuid4().hex[:12]
            log.exception("rpc.crashed", rpc=method.__name__, ref=ref)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"internal error (server log reference {ref})"
            )
            raise
        finally:
            self.metrics.rpc(method.__name__, code).observe(time.perf_counter() - started)

    return wrapper


def _trailers(exc: EngineError) -> tuple[tuple[str, str], ...]:
    """A rate refusal says when to come back, in whole milliseconds (at least 1)."""
    if isinstance(exc, RateLimited):
        return ((RETRY_AFTER_METADATA, str(max(1, math.ceil(exc.retry_after * 1000)))),)
    return ()
