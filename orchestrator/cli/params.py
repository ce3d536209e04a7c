"""Parameter types and shared options of the `weft` commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from sdk.client import DEFAULT_ADDRESS
from sdk.durations import parse_duration

F = TypeVar("F", bound=Callable[..., Any])


class DurationType(click.ParamType):  # type: ignore[type-arg]
    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class JsonType(click.ParamType):  # type: ignore[type-arg]
    """A JSON document given on the command line (`--input '{"n": 1}'`)."""

    name = "json"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON ({exc.msg} at position {exc.pos}): {value!r}", param, ctx)


class AddressType(click.ParamType):  # type: ignore[type-arg]
    """HOST:PORT of a server, checked here: gRPC would quietly wrap a bad port."""

    name = "host:port"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        text = str(value).strip()
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            self.fail(f"{text!r} is not HOST:PORT with a port from 1 to 65535", param, ctx)
        return text


ADDRESS = AddressType()
DURATION = DurationType()
JSON = JsonType()


def server_options(fn: F) -> F:
    """--address and --namespace, for every command that talks to a server."""
    fn = click.option(
        "--namespace",
        envvar="WEFT_NAMESPACE",
        default="default",
        show_default=True,
        help="the namespace to work in",
    )(fn)
    fn = click.option(
        "--address",
        type=ADDRESS,
        envvar="WEFT_ADDRESS",
        default=DEFAULT_ADDRESS,
        show_default=True,
        help="HOST:PORT of a Weft server",
    )(fn)
    return fn


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print one JSON document")(fn)
