"""Types: `let TYPE NAME = …` and typed parameters coerce values."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Final

import yaml

from workers.steps import yamlbound
from workers.steps.expressions.base import ABSENT, TYPES, ExpressionError, LimitExceeded, total
from workers.steps.expressions.letlang import _describe, check_value
from workers.steps.expressions.values import _numeric, text


class _TextTimestampLoader(yaml.SafeLoader):
    """YAML that leaves timestamps as text, so parsed values stay JSON data."""


_TextTimestampLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _parse_yaml(source: str) -> Any:
    """The last YAML document of `source` (Brooklyn discards text before `---`)."""
    try:
        documents = yamlbound.load_all(source, _TextTimestampLoader)
    except yaml.YAMLError as exc:
        raise ExpressionError(f"invalid YAML: {_first_line(str(exc))}") from None
    except yamlbound.AliasBomb as exc:
        raise LimitExceeded(f"YAML line {exc.line}: {exc.message}") from None
    except RecursionError:
        raise LimitExceeded("the YAML nests too deeply") from None
    return check_value(documents[-1]) if documents else None


def _parse_json(source: str) -> Any:
    try:
        return check_value(json.loads(source))
    except RecursionError:
        raise LimitExceeded("the JSON nests too deeply") from None
    except ValueError as exc:
        raise ExpressionError(f"invalid JSON: {exc}") from None


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else message


def _parse_structured(source: str) -> Any:
    try:
        parsed = json.loads(source)
    except ValueError:
        return _parse_yaml(source)
    return check_value(parsed)


def _cannot(value: Any, type_name: str, why: str = "") -> ExpressionError:
    return ExpressionError(f"cannot convert {_describe(value)} to {type_name}{why}")


def _to_integer(value: Any) -> int:
    number = _numeric(value)
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        return int(number)
    if isinstance(number, int):
        return number
    raise _cannot(value, "integer")


def _to_double(value: Any) -> float:
    number = _numeric(value)
    if number is None:
        raise _cannot(value, "double")
    return float(number)


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes"):
            return True
        if word in ("false", "no"):
            return False
    raise _cannot(value, "boolean")


def _to_map(value: Any) -> dict[str, Any]:
    parsed = _parse_structured(value) if isinstance(value, str) else value
    if isinstance(parsed, Mapping):
        return dict(parsed)
    raise _cannot(value, "map")


def _to_list(value: Any) -> list[Any]:
    parsed = _parse_structured(value) if isinstance(value, str) else value
    if isinstance(parsed, list | tuple):
        return list(parsed)
    raise _cannot(value, "list")


_CONVERTERS: Final[dict[str, Callable[[Any], Any]]] = {
    "integer": _to_integer,
    "double": _to_double,
    "string": text,
    "boolean": _to_boolean,
    "map": _to_map,
    "list": _to_list,
    "json": lambda value: _parse_json(value) if isinstance(value, str) else value,
    "yaml": lambda value: _parse_yaml(value) if isinstance(value, str) else value,
}


@total
def coerce(type_name: str, value: Any) -> Any:
    """`value` as `type_name` (one of TYPES). Null stays null whatever the type:
    a parameter or variable may have no value."""
    converter = _CONVERTERS.get(type_name)
    if converter is None:
        raise ExpressionError(f"unknown type {type_name!r} (known: {', '.join(TYPES)})")
    if value is None:
        return None
    if value is ABSENT:
        raise _cannot(value, type_name, ": there is no value")
    try:
        return converter(value)
    except ExpressionError as exc:
        if exc.message.startswith("cannot convert"):
            raise
        error = _cannot(value, type_name, f": {exc.message}")
        # A bound that was hit stays a LimitExceeded: the cause is the size, not the text.
        raise (LimitExceeded(error.message) if isinstance(exc, LimitExceeded) else error) from None
