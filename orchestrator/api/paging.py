"""Page tokens: cursors, not secrets. A malformed one is INVALID_ARGUMENT."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.engine.errors import InvalidArgument


def encode(*fields: Any) -> bytes:
    return json.dumps(list(fields), separators=(",", ":")).encode()


# Tokens this service writes are a few ids long; anything much longer is not one.
MAX_TOKEN_BYTES = 4096
MAX_CURSOR_INT = 2**63 - 1


def decode(raw: bytes, types: tuple[type, ...]) -> list[Any]:
    """The token's fields, each checked against its expected type (ints within 0..int64)."""
    fields = None
    if len(raw) <= MAX_TOKEN_BYTES:
        try:
            fields = json.loads(raw)
        except (ValueError, RecursionError):
            fields = None
    if not isinstance(fields, list) or len(fields) != len(types):
        raise InvalidArgument("next_page_token is malformed")
    for value, kind in zip(fields, types, strict=True):
        # bool is an int to Python, never to us.
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InvalidArgument("next_page_token is malformed")
        # Event ids are BIGINT columns: a number past them is no cursor of ours,
        # and the database would refuse it with an error of its own.
        if isinstance(value, int) and not 0 <= value <= MAX_CURSOR_INT:
            raise InvalidArgument("next_page_token is malformed")
    return fields
