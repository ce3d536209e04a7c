"""Parameter types and shared options of the `weft` commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from sdk import event_loops
from sdk.client import DEFAULT_ADDRESS
from sdk.credentials import check_api_key
from sdk.durations import parse_duration
from sdk.event_loops import EVENT_LOOP_ENV, EVENT_LOOPS
from sdk.tls import TlsConfig

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


class SizeType(click.ParamType):  # type: ignore[type-arg]
    """A size in bytes, `262144`, `256KiB` or `16MiB` (binary units), from `low`
    to `high`."""

    name = "size"
    _UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024 * 1024}

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        text = str(value).strip()
        digits = len(text) - len(text.lstrip("0123456789"))
        number, unit = text[:digits], text[digits:].strip().lower()
        if not number or unit not in self._UNITS or digits > 18:  # (past that, no size)
            shown = repr(text if len(text) <= 40 else text[:40] + "…")
            self.fail(f"{shown} is not a size: give bytes, or KiB / MiB (256KiB)", param, ctx)
        size = int(number) * self._UNITS[unit]
        if not self.low <= size <= self.high:
            self.fail(f"{value} is not from {_size(self.low)} to {_size(self.high)}", param, ctx)
        return size


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)}MiB" if n % (1024 * 1024) == 0 else f"{n // 1024}KiB"


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
        except RecursionError:  # (the server refuses far shallower nesting anyway)
            self.fail("JSON nested too deep to read", param, ctx)


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
# The levels `weft server`, `weft runner` and `weft decider` log at (with the
# aliases Python's logging reads, which worked before the list did).
LOG_LEVEL = click.Choice(
    ["debug", "info", "warning", "warn", "error", "critical", "fatal"], case_sensitive=False
)


def event_loop_option(default: str) -> Callable[[F], F]:
    """`--event-loop` of `weft server` (default "auto"), `weft runner` and `weft
    decider` (default "asyncio": they run the user's code; sdk/event_loops.py)."""
    return click.option(
        "--event-loop",
        envvar=EVENT_LOOP_ENV,
        type=click.Choice(EVENT_LOOPS),
        default=default,
        show_default=True,
        help="the process's event loop: uvloop (auto: where it is installed) or asyncio's own",
    )


def event_loop_factory(event_loop: str) -> event_loops.LoopFactory | None:
    """What makes the loop `--event-loop` names; `uvloop` where it is not
    installed is a usage error, before anything starts or loads."""
    try:
        return event_loops.loop_factory(event_loop)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--event-loop'") from None


# Where the TLS options leave their values for `client_tls` (not as arguments:
# every command gets them without naming them).
_TLS_META = "weft.tls"
_FILE = click.Path(exists=True, dir_okay=False)


def _keep_tls(ctx: click.Context, param: click.Parameter, value: object) -> object:
    if value:
        ctx.meta.setdefault(_TLS_META, {})[param.name] = value
    return value


def client_tls(ctx: click.Context | None = None) -> TlsConfig | None:
    """The TLS settings of this command's --tls* options (None: plaintext)."""
    ctx = ctx or click.get_current_context()
    given: dict[str, Any] = ctx.meta.get(_TLS_META, {})
    if not given:
        return None
    if bool(given.get("tls_cert")) != bool(given.get("tls_key")):
        raise click.UsageError("--tls-cert and --tls-key go together; give both")
    return TlsConfig(
        ca=given.get("tls_ca"),
        cert=given.get("tls_cert"),
        key=given.get("tls_key"),
        server_name=given.get("tls_server_name", ""),
    )


def tls_options(fn: F) -> F:
    """--tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name: how a client
    command reaches a server over TLS. Any of them turns TLS on."""
    for flags, envvar, kind, help in reversed(
        (
            ("--tls", "WEFT_TLS", bool, "connect over TLS, trusting the system's root CAs"),
            ("--tls-ca", "WEFT_TLS_CA", _FILE, "PEM CA certificate(s) to verify the server with"),
            ("--tls-cert", "WEFT_TLS_CLIENT_CERT", _FILE, "PEM client certificate (mutual TLS)"),
            ("--tls-key", "WEFT_TLS_CLIENT_KEY", _FILE, "PEM private key of --tls-cert"),
            (
                "--tls-server-name",
                "WEFT_TLS_SERVER_NAME",
                str,
                "the name the server's certificate must carry, if not the address's host",
            ),
        )
    ):
        fn = click.option(
            flags,
            envvar=envvar,
            is_flag=kind is bool,
            type=None if kind is bool else kind,
            expose_value=False,
            callback=_keep_tls,
            help=help,
        )(fn)
    return fn


_API_KEY_META = "weft.api_key"


def _keep_api_key(ctx: click.Context, param: click.Parameter, value: object) -> object:
    if value:
        try:
            check_api_key(str(value))
        except ValueError as exc:  # (a usage error, said before any call)
            raise click.BadParameter(str(exc), ctx, param) from None
        ctx.meta[_API_KEY_META] = value
    return value


def client_api_key(ctx: click.Context | None = None) -> str | None:
    """The API key of this command's --api-key option or WEFT_API_KEY (None: none)."""
    ctx = ctx or click.get_current_context()
    key = ctx.meta.get(_API_KEY_META)
    return str(key) if key else None


def api_key_option(fn: F) -> F:
    return click.option(
        "--api-key",
        envvar="WEFT_API_KEY",
        expose_value=False,
        callback=_keep_api_key,
        help="API key for a server started with --auth (prefer WEFT_API_KEY: `ps` shows"
        " arguments to every user)",
    )(fn)


def server_options(fn: F) -> F:
    """--address and --namespace (and the TLS and API key options), for every
    command that talks to a server."""
    fn = tls_options(fn)
    fn = api_key_option(fn)
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
