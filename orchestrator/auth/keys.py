"""API keys: `weft.<id>.<secret>`, sent as `authorization: Bearer <key>`.

The id is public (it names the key in lists, logs and events); the secret is
32 random bytes that only the key's holder has. The database keeps
HMAC-SHA256(secret) under the database's own auth key, so a leaked copy of the
credentials table does not let anyone in, and a lookup is by id, then one
constant-time comparison.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "weft"
KEY_ID_PREFIX = "k_"
PRINCIPAL_ID_PREFIX = "p_"


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(6)


def new_key() -> tuple[str, str, str]:
    """(id, secret, the whole key to hand out)."""
    key_id = new_id(KEY_ID_PREFIX)
    secret = secrets.token_urlsafe(32)
    return key_id, secret, f"{PREFIX}.{key_id}.{secret}"


def split(key: str) -> tuple[str, str] | None:
    """(id, secret) of a key in the right shape, else None."""
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1].startswith(KEY_ID_PREFIX):
        return None
    if not parts[2] or len(key) > 200:
        return None
    return parts[1], parts[2]


def keyed_hash(auth_secret: bytes, secret: str) -> str:
    return hmac.new(auth_secret, secret.encode(), hashlib.sha256).hexdigest()


def matches(auth_secret: bytes, secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(keyed_hash(auth_secret, secret), stored_hash)
