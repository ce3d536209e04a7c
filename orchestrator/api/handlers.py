"""Registering a service so that request bytes which do not parse are the
caller's error (INVALID_ARGUMENT), not grpc's UNKNOWN with Python's text.

The generated registration hands grpc each message's `FromString`; when it
raises, grpc answers before any servicer code runs. Here the deserializer
returns a `MalformedRequest` instead, and `errors.grpc_errors` refuses it like
any other bad input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message


@dataclass(frozen=True)
class MalformedRequest:
    """What arrived instead of a `message` request: bytes that do not parse."""

    message: str
    error: str


def lenient(cls: type[Message]) -> Callable[[bytes], Message | MalformedRequest]:
    def parse(data: bytes) -> Message | MalformedRequest:
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return MalformedRequest(cls.DESCRIPTOR.name, str(exc)[:200])

    return parse


def request_parser(method: MethodDescriptor) -> Callable[[bytes], Message | MalformedRequest]:
    """How every transport (unary, lanes, in process) reads `method`'s request."""
    return lenient(message_factory.GetMessageClass(method.input_type))


def register(server: grpc.aio.Server, servicer: Any, service: ServiceDescriptor) -> None:
    """Add `servicer`'s methods of `service` (all unary) to `server`."""
    handlers = {}
    for method in service.methods:
        response = message_factory.GetMessageClass(method.output_type)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=request_parser(method),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    # As the generated registration does: grpc looks registered methods up
    # without going through the generic handlers.
    server.add_registered_method_handlers(service.full_name, handlers)
