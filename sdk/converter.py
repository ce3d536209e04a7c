"""Python values to JSON payloads and back.

Encoding understands what business code passes around: dataclasses, datetimes
and dates, UUIDs, Decimals (as strings, so no precision is lost), enums, sets,
and pydantic models when pydantic is installed. Decoding gives plain JSON
values, or, given a type (an activity's parameter annotation), rebuilds that
type from them.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import types
import typing
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from sdk.api.weft.v1 import common_pb2 as c

JSON = "json"


class PayloadDecodeError(ValueError):
    """A payload's bytes are not what its encoding says (not UTF-8, not JSON, nested too deep)."""


@dataclasses.dataclass(frozen=True)
class UndecodablePayload:
    """A payload that could not be decoded, kept as its raw bytes.

    Views of a history (`Client.history()`, `weft history`, `describe`) show one
    of these in place of the value, so one bad payload never hides the rest.
    """

    data: bytes
    encoding: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "$undecodable": {
                "encoding": self.encoding or JSON,
                "error": self.error,
                "base64": base64.b64encode(self.data).decode(),
            }
        }

    def __str__(self) -> str:
        size = len(self.data)
        return f"<undecodable {self.encoding or JSON} payload, {size} bytes: {self.error}>"


class PayloadConverter:
    """The JSON converter; subclass `to_json`/`from_json` to teach it more types."""

    def encode(self, value: Any) -> c.Payload:
        data = json.dumps(value, default=self.to_json, separators=(",", ":"), ensure_ascii=False)
        return c.Payload(data=data.encode(), encoding=JSON)

    def decode(self, payload: c.Payload | None, type_hint: Any = None) -> Any:
        if payload is None or not payload.data:
            return None
        if payload.encoding not in ("", JSON):
            # Someone else's encoding: hand over the bytes rather than guess.
            return {"encoding": payload.encoding, "data": base64.b64encode(payload.data).decode()}
        try:
            value = json.loads(payload.data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            # UnicodeDecodeError is a ValueError; RecursionError: nested too deep.
            raise PayloadDecodeError(_decode_error(exc)) from None
        return value if type_hint is None else self.from_json(value, type_hint)

    def decode_lenient(self, payload: c.Payload | None) -> Any:
        """`decode`, or an `UndecodablePayload` holding the bytes when they cannot be decoded."""
        try:
            return self.decode(payload)
        except PayloadDecodeError as exc:
            assert payload is not None
            return UndecodablePayload(bytes(payload.data), payload.encoding, str(exc))

    # -- hooks -------------------------------------------------------------------------

    def to_json(self, value: Any) -> Any:
        """A JSON-ready form of a value `json` cannot encode itself."""
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, timedelta):
            return value.total_seconds()
        if isinstance(value, uuid.UUID | Decimal):
            return str(value)
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, set | frozenset | tuple):
            return list(value)
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, UndecodablePayload):
            return value.to_json()
        dump = getattr(value, "model_dump", None)  # pydantic v2, without importing it
        if callable(dump):
            return dump(mode="json")
        raise TypeError(f"cannot encode {type(value).__name__} as JSON")

    def from_json(self, value: Any, hint: Any) -> Any:
        """`value` (plain JSON) as an instance of `hint`, where it can be rebuilt."""
        if hint is Any or hint is None or value is None:
            return value
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            for arg in args:
                if arg is type(None):
                    continue
                try:
                    return self.from_json(value, arg)
                except (TypeError, ValueError):
                    continue
            return value
        if origin is tuple and isinstance(value, list) and args and args[-1] is not Ellipsis:
            return tuple(self.from_json(v, t) for v, t in zip(value, args, strict=False))
        if origin in (list, set, frozenset, tuple) and isinstance(value, list):
            item = args[0] if args else Any
            items = [self.from_json(v, item) for v in value]
            return items if origin is list else origin(items)
        if origin is dict and isinstance(value, dict):
            item = args[1] if len(args) == 2 else Any
            return {k: self.from_json(v, item) for k, v in value.items()}
        if not isinstance(hint, type):
            return value
        return self._instance(value, hint)

    def _instance(self, value: Any, cls: type) -> Any:
        if dataclasses.is_dataclass(cls) and isinstance(value, dict):
            hints = typing.get_type_hints(cls)
            fields = {f.name for f in dataclasses.fields(cls) if f.init}
            kwargs = {
                k: self.from_json(v, hints.get(k, Any)) for k, v in value.items() if k in fields
            }
            return cls(**kwargs)
        validate = getattr(cls, "model_validate", None)  # pydantic v2
        if callable(validate):
            return validate(value)
        if cls is datetime:
            return datetime.fromisoformat(value)
        if cls is date:
            return date.fromisoformat(value)
        if cls is time:
            return time.fromisoformat(value)
        if cls is timedelta:
            return timedelta(seconds=value)
        if cls in (uuid.UUID, Decimal):
            return cls(value)
        if issubclass(cls, enum.Enum):
            return cls(value)
        if cls is bytes and isinstance(value, str):
            return base64.b64decode(value)
        return value


def _decode_error(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    if isinstance(exc, RecursionError):
        return "nested too deeply to decode"
    return f"not JSON: {exc}"


DEFAULT_CONVERTER = PayloadConverter()
