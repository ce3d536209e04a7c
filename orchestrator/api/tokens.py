"""Task tokens: opaque to workers, signed by the server (HMAC-SHA256), so a
forged or altered token is refused before the database is touched."""

from __future__ import annotations

import hashlib
import hmac
import json

from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.state import RunKey
from orchestrator.engine.tokens import TaskToken

_VERSION = b"\x01"
_MAC_BYTES = 16


class TokenCodec:
    def __init__(self, secret: bytes) -> None:
        # The key's HMAC state, made once: each token's MAC starts from a copy
        # (a third cheaper than keying a new HMAC per token).
        self._keyed = hmac.new(secret, digestmod=hashlib.sha256)

    def _mac(self, body: bytes) -> bytes:
        mac = self._keyed.copy()
        mac.update(body)
        return mac.digest()[:_MAC_BYTES]

    def encode(self, token: TaskToken) -> bytes:
        body = json.dumps(
            [
                token.key.namespace,
                token.key.workflow_id,
                token.key.run_id,
                token.kind,
                token.scheduled_id,
                token.started_id,
                token.attempt,
                token.task_list,
            ],
            separators=(",", ":"),
        ).encode()
        return _VERSION + self._mac(body) + body

    def decode(self, raw: bytes, kind: str) -> TaskToken:
        if not raw:
            raise InvalidArgument("task_token is required")
        mac, body = raw[1 : 1 + _MAC_BYTES], raw[1 + _MAC_BYTES :]
        if raw[:1] != _VERSION or not hmac.compare_digest(mac, self._mac(body)):
            raise InvalidArgument("task_token is not a token this service issued")
        ns, wf, run, token_kind, scheduled, started, *rest = json.loads(body)
        if token_kind != kind:
            raise InvalidArgument(f"task_token is for a {token_kind} task, not a {kind} task")
        # Tokens issued before attempts (or task lists) existed are shorter.
        attempt = int(rest[0]) if rest else 1
        task_list = str(rest[1]) if len(rest) > 1 else ""
        return TaskToken(
            RunKey(ns, wf, run), token_kind, int(scheduled), int(started), attempt, task_list
        )
