"""What a payload must be before anything is appended: within the size limit,
and, when its encoding is JSON, UTF-8 text of JSON no deeper than the depth
limit. A payload stored once is read by every decider, client and `weft history`
of its run for good, so one that none of them could decode is refused here.
"""

from __future__ import annotations

import json
import re

from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.limits import Limits
from sdk.api.weft.v1 import common_pb2 as c

JSON_ENCODINGS = frozenset({"", "json"})
# A JSON string (escapes included), then anything but a bracket.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def check(where: str, payload: c.Payload, limits: Limits) -> None:
    size = len(payload.data)
    if size > limits.payload_bytes:
        raise InvalidArgument(
            f"{where} is {size} bytes: the payload limit is {limits.payload_bytes} bytes"
        )
    if payload.encoding not in JSON_ENCODINGS or not size:
        return  # another converter's bytes are its own business; empty is "no value"
    try:
        text = payload.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{where} is not UTF-8 (byte {exc.start})") from None
    try:
        json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise InvalidArgument(_too_deep(where, limits)) from None
    except ValueError as exc:
        raise InvalidArgument(f"{where} is not JSON: {exc}") from None
    if depth_exceeds(text, limits.payload_depth):
        raise InvalidArgument(_too_deep(where, limits))


def depth_exceeds(text: str, limit: int) -> bool:
    """Whether valid JSON `text` nests arrays and objects more than `limit` deep.

    Strings are blanked out, everything but brackets dropped, then innermost
    pairs removed once per level: C-speed passes, and as many as the payload is
    deep (a few for most), never more than `limit` + 1.
    """
    if len(text) <= 2 * limit:
        return False  # it takes two characters a level
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _INNERMOST.sub("", brackets)
    return bool(brackets)


def _no_constants(name: str) -> None:
    # NaN and Infinity are Python's, not JSON's: other clients could not read them.
    raise ValueError(f"{name} is not a JSON value")


def _too_deep(where: str, limits: Limits) -> str:
    return f"{where} nests deeper than {limits.payload_depth} levels"
