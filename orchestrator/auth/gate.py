"""Who is calling: an API key or a verified client certificate, found in the
credentials table and remembered for a while; and what one caller may use at
once (per-principal limits).

A credential read from the database is kept for `REMEMBER` seconds. Revoking
one drops it here at once on the node that revoked it, and on every other node
when the change notice arrives (PostgreSQL); the time limit bounds how long a
lost notice could keep a revoked credential working.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from orchestrator.counting import holding
from orchestrator.engine.errors import RateLimited, ResourceExhausted, Unauthenticated
from orchestrator.store.credentials import KEY, CredentialRow, Credentials

from . import keys
from .grants import WORKER, Grant, Refused, Scope

REMEMBER = 30.0
BEARER = "bearer "


@dataclass(frozen=True)
class Caller:
    principal: str
    """As recorded in events: "key:<id>", "certificate:<subject>", or
    "embedded:<host>" (`embedded_workers`)."""
    grants: tuple[Grant, ...]
    credential_ids: tuple[str, ...] = ()
    """The credentials behind it (none for `embedded`)."""
    since: float = 0.0
    """When (monotonic) the credentials were last read or trusted."""
    expires_at: datetime | None = None
    """The earliest expiry among them."""
    embedded: bool = False
    """The node's own embedded workers: no credential to revoke or lose."""

    def check(self, rpc: str, scope: Scope) -> None:
        """Raise `Refused` unless one of the caller's grants allows the call."""
        refusals = []
        for grant in self.grants:
            try:
                grant.check(rpc, scope)
                return
            except Refused as exc:
                refusals.append(str(exc))
        raise Refused(f"{self.principal} may not call {rpc}: {'; '.join(refusals)}")


def grant_of(row: CredentialRow) -> Grant:
    return Grant(
        namespace=row.namespace,
        role=row.role,
        task_lists=frozenset(row.task_lists),
        workflow_types=frozenset(row.workflow_types),
        signal_names=frozenset(row.signal_names),
    )


def embedded_workers(namespace: str, task_lists: Iterable[str]) -> Caller:
    """The caller the workers of `weft server --embed` are under `--auth`: a
    worker of `namespace` narrowed to the task lists they poll, as the API key
    of a `weft decider` / `weft runner` for those lists would be. It holds no
    credential (its calls never leave the process, `api.in_process`), so there
    is nothing to revoke; the per-principal limits still apply to it."""
    lists = frozenset(task_lists)
    if not lists:  # (no narrowing at all would be a worker of every list)
        raise ValueError("embedded workers poll at least one task list")
    grant = Grant(namespace=namespace, role=WORKER, task_lists=lists)
    return Caller(f"embedded:{socket.gethostname()}", (grant,), embedded=True)


class Authenticator:
    def __init__(self, credentials: Credentials, auth_secret: bytes) -> None:
        self._credentials = credentials
        self._secret = auth_secret
        self._keys: dict[str, tuple[float, CredentialRow | None]] = {}
        self._subjects: dict[tuple[str, ...], tuple[float, list[CredentialRow]]] = {}
        # When each credential was last said to have changed, and when all were:
        # a read that began before is not remembered, and a caller admitted
        # before is not handed tasks any more (`still_valid`).
        self._changed: dict[str, float] = {}
        self._all_changed = 0.0

    def forget(self, credential_id: str) -> None:
        """A credential changed (revoked here or on another node)."""
        self._changed[credential_id] = time.monotonic()
        self._keys.pop(credential_id, None)
        self._subjects.clear()

    def forget_all(self) -> None:
        self._all_changed = time.monotonic()
        self._keys.clear()
        self._subjects.clear()

    def _unchanged_since(self, since: float, ids: tuple[str, ...]) -> bool:
        return self._all_changed < since and all(self._changed.get(i, 0.0) < since for i in ids)

    def still_valid(self, who: Caller) -> bool:
        """Whether a caller admitted earlier (a waiting poll) may still be handed work:
        none of its credentials changed since, and none expired."""
        if who.embedded:
            return True
        if who.expires_at is not None and datetime.now(UTC) >= who.expires_at:
            return False
        return self._unchanged_since(who.since, who.credential_ids)

    async def caller(self, authorization: str, subjects: list[str]) -> Caller:
        """The caller an `authorization` header or else a certificate's subjects
        name; `Unauthenticated` with the reason when neither does."""
        now = datetime.now(UTC)
        if authorization:
            return await self._key_caller(authorization, now)
        if subjects:
            return await self._certificate_caller(subjects, now)
        raise Unauthenticated(
            "this server requires credentials: an API key (authorization: Bearer <key>) "
            "or a client certificate of a principal"
        )

    async def _key_caller(self, authorization: str, now: datetime) -> Caller:
        if not authorization.lower().startswith(BEARER):
            raise Unauthenticated("the authorization header must be 'Bearer <API key>'")
        parts = keys.split(authorization[len(BEARER) :].strip())
        if parts is None:
            raise Unauthenticated("the API key is malformed (keys look like weft.k_….…)")
        key_id, secret = parts
        row = await self._key(key_id)
        if (
            row is None
            or row.kind != KEY
            or not keys.matches(self._secret, secret, row.secret_hash)
        ):
            raise Unauthenticated(f"API key {key_id} is not valid")
        if row.revoked_at is not None:
            raise Unauthenticated(f"API key {key_id} was revoked")
        if row.expires_at is not None and now >= row.expires_at:
            raise Unauthenticated(f"API key {key_id} has expired")
        return Caller(
            f"key:{key_id}", (grant_of(row),), (key_id,), self._read_at(key_id), row.expires_at
        )

    def _read_at(self, key_id: str) -> float:
        remembered = self._keys.get(key_id)
        return remembered[0] if remembered is not None else time.monotonic()

    async def _key(self, key_id: str) -> CredentialRow | None:
        remembered = self._keys.get(key_id)
        if remembered is not None and time.monotonic() - remembered[0] < REMEMBER:
            return remembered[1]
        began = time.monotonic()
        row = await self._credentials.get(key_id)
        # Unknown ids are not remembered: a key made on another node works at once.
        # Nor is a row read while it was being revoked (it may predate the revocation).
        if row is not None and self._unchanged_since(began, (key_id,)):
            self._keys[key_id] = (began, row)
        return row

    async def _certificate_caller(self, subjects: list[str], now: datetime) -> Caller:
        wanted = tuple(sorted(set(subjects)))
        remembered = self._subjects.get(wanted)
        if remembered is not None and time.monotonic() - remembered[0] < REMEMBER:
            began, rows = remembered
        else:
            began = time.monotonic()
            rows = await self._credentials.for_subjects(list(wanted))
            # As for keys, a subject nobody added is not remembered: a principal
            # added through another node works at once.
            if rows and self._unchanged_since(began, tuple(r.id for r in rows)):
                self._subjects[wanted] = (began, rows)
        # In a fixed order, so that the principal recorded is always the same one.
        usable = sorted((r for r in rows if r.usable_at(now)), key=lambda r: (r.subject, r.id))
        if not usable:
            raise Unauthenticated(
                f"the client certificate ({', '.join(wanted)}) is not a principal of this "
                "server, or its principal was revoked or has expired"
            )
        expiries = [r.expires_at for r in usable if r.expires_at is not None]
        return Caller(
            f"certificate:{usable[0].subject}",
            tuple(grant_of(r) for r in usable),
            tuple(r.id for r in usable),
            began,
            min(expiries) if expiries else None,
        )


@dataclass
class _Bucket:
    tokens: float
    at: float


class PrincipalLimits:
    """Per principal: long polls waiting at once, and requests per second (a
    token bucket holding up to two seconds' worth)."""

    def __init__(self, max_polls: int, rate: float) -> None:
        self.max_polls = max_polls
        self.rate = rate
        self._polls: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    def spend(self, principal: str) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        bucket = self._buckets.get(principal)
        capacity = max(2 * self.rate, 1.0)  # (a rate under 0.5/s still lets one through)
        if bucket is None:
            bucket = self._buckets[principal] = _Bucket(capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens < 1:
            raise RateLimited(
                f"{principal} is over its request rate ({self.rate:g}/s); slow down and retry",
                retry_after=(1 - bucket.tokens) / self.rate,
            )
        bucket.tokens -= 1

    @contextmanager
    def poll(self, principal: str) -> Iterator[None]:
        waiting = self._polls.get(principal, 0)
        if self.max_polls and waiting >= self.max_polls:
            raise ResourceExhausted(
                f"{principal} already has {waiting} polls waiting (the limit); "
                "use fewer pollers or ask for a higher --max-polls-per-principal"
            )
        with holding(self._polls, principal):
            yield
