"""Page tokens: cursors, not secrets. A malformed one is INVALID_ARGUMENT."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.engine.errors import InvalidArgument


def encode(*fields: Any) -> bytes:
    return json.dumps(list(fields), separators=(",", ":")).encode()


def decode(raw: bytes, arity: int) -> list[Any]:
    try:
        fields = json.loads(raw)
    except ValueError:
        fields = None
    if not isinstance(fields, list) or len(fields) != arity:
        raise InvalidArgument("next_page_token is malformed")
    return fields
