"""The credentials table: API keys (as keyed hashes) and certificate principals.

Each row is one grant. Revoking one, or adding a certificate principal, sends
`<node>|credentials|<id>` on weft_changes, so every other node drops what it
remembered of the credential (or of certificate subjects) at once
(`orchestrator.auth.gate`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from orchestrator.engine.errors import NotFound

from . import dialect
from .notices import CHANGES_CHANNEL, CREDENTIALS, change
from .reads import StoreBase
from .rows import aware
from .schema import credentials
from .upkeep_writes import UpkeepWrites

KEY, CERTIFICATE = "key", "certificate"


@dataclass(frozen=True)
class CredentialRow:
    id: str
    kind: str
    subject: str
    secret_hash: str
    name: str
    namespace: str
    role: str
    task_lists: tuple[str, ...]
    workflow_types: tuple[str, ...]
    signal_names: tuple[str, ...]
    created_at: datetime
    created_by: str
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def usable_at(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


def _row(r: object) -> CredentialRow:
    m = r._mapping  # type: ignore[attr-defined]
    return CredentialRow(
        id=m["id"],
        kind=m["kind"],
        subject=m["subject"],
        secret_hash=m["secret_hash"],
        name=m["name"],
        namespace=m["namespace"],
        role=m["role"],
        task_lists=tuple(json.loads(m["task_lists"])),
        workflow_types=tuple(json.loads(m["workflow_types"])),
        signal_names=tuple(json.loads(m["signal_names"])),
        created_at=aware(m["created_at"]),
        created_by=m["created_by"],
        expires_at=aware(m["expires_at"]) if m["expires_at"] is not None else None,
        revoked_at=aware(m["revoked_at"]) if m["revoked_at"] is not None else None,
    )


def _naive(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=None) if value is not None else None


async def _notify(conn: AsyncConnection, store: StoreBase, credential_id: str) -> None:
    await dialect.notify(
        conn, store.is_pg, CHANGES_CHANNEL, change(store.node_id, CREDENTIALS, credential_id)
    )


class Credentials:
    """Reads and writes of the credentials table, through the store's
    connections and retries."""

    def __init__(self, store: UpkeepWrites) -> None:
        self._store = store

    async def auth_secret(self) -> bytes:
        """The key API key hashes are made with: made once, shared by all nodes."""
        return await self._store.meta_secret("auth_secret")

    async def add(self, row: CredentialRow) -> None:
        values = {
            "id": row.id,
            "kind": row.kind,
            "subject": row.subject,
            "secret_hash": row.secret_hash,
            "name": row.name,
            "namespace": row.namespace,
            "role": row.role,
            "task_lists": json.dumps(list(row.task_lists)),
            "workflow_types": json.dumps(list(row.workflow_types)),
            "signal_names": json.dumps(list(row.signal_names)),
            "created_at": _naive(row.created_at),
            "created_by": row.created_by,
            "expires_at": _naive(row.expires_at),
            "revoked_at": None,
        }

        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(insert(credentials).values(**values))
                if row.kind == CERTIFICATE:
                    # Other nodes drop what they remember of certificate subjects:
                    # this subject may now have one grant more.
                    await _notify(conn, store, row.id)

        await store._retrying(attempt)

    async def get(self, credential_id: str) -> CredentialRow | None:
        row = await self._store._first(select(credentials).where(credentials.c.id == credential_id))
        return _row(row) if row is not None else None

    async def for_subjects(self, subjects: list[str]) -> list[CredentialRow]:
        """Certificate principals naming any of these subjects."""
        if not subjects:
            return []
        rows = await self._store._rows(
            select(credentials).where(
                credentials.c.kind == CERTIFICATE, credentials.c.subject.in_(subjects)
            )
        )
        return [_row(r) for r in rows]

    async def find(self, namespaces: list[str] | None) -> list[CredentialRow]:
        """Every credential (None) or those of these namespaces, oldest first."""
        query = select(credentials).order_by(credentials.c.created_at, credentials.c.id)
        if namespaces is not None:
            query = query.where(credentials.c.namespace.in_(namespaces))
        return [_row(r) for r in await self._store._rows(query)]

    async def revoke(self, credential_id: str, now: datetime) -> CredentialRow:
        """Mark it revoked (again is fine) and tell the other nodes."""
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                done = await conn.execute(
                    update(credentials)
                    .where(credentials.c.id == credential_id)
                    .where(credentials.c.revoked_at.is_(None))
                    .values(revoked_at=_naive(now))
                )
                if done.rowcount:
                    await _notify(conn, store, credential_id)

        await store._retrying(attempt)
        row = await self.get(credential_id)
        if row is None:
            raise NotFound(f"no credential {credential_id!r}")
        return row

    async def active_admins(self, now: datetime) -> list[CredentialRow]:
        """Usable admins of every namespace ("*"): those who can make any credential."""
        rows = await self.find(["*"])
        return [r for r in rows if r.role == "admin" and r.usable_at(now)]
