"""The store's writes that change no run: poller sightings, namespace and
type registrations, and the server's secrets."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from orchestrator.engine.retention import SYSTEM_DEFAULT

from . import dialect
from .notices import CHANGES_CHANNEL, TYPES, change
from .reads import StoreBase
from .rows import TaskListKey, naive, utcnow
from .schema import activity_types, namespaces, pollers, server_meta, workflow_types


class UpkeepWrites(StoreBase):
    async def record_pollers(self, sightings: list[tuple[TaskListKey, str, float]]) -> None:
        """Write (task list, identity, when) sightings, one transaction for all."""
        if not sightings:
            return
        rows = [
            {
                "namespace": key.namespace,
                "kind": key.kind,
                "task_list": key.task_list,
                "identity": identity,
                "last_seen": naive(at),
            }
            for key, identity, at in sorted(sightings, key=lambda r: (r[0].task_list, r[1]))
        ]
        stmt = dialect.upsert_many(
            self.is_pg, pollers, ["namespace", "kind", "task_list", "identity"], ["last_seen"]
        )

        async def attempt() -> None:
            async with self._write() as conn:
                await conn.execute(stmt, rows)

        await self._retrying(attempt)

    async def _execute(self, stmt: Any) -> None:
        async with self._write() as conn:
            await conn.execute(stmt)

    async def register_namespace(self, name: str, retention_text: str, description: str) -> None:
        row = {
            "name": name,
            "retention": retention_text or SYSTEM_DEFAULT,
            "description": description,
            "registered_at": naive(utcnow().timestamp()),
        }
        # Registering again changes what it gives, as for types.
        given = {k: v for k, v in row.items() if v not in ("", None)}
        if not retention_text:
            given.pop("retention")
        stmt = dialect.upsert(self.is_pg, namespaces, row, ["name"], update=given)
        await self._retrying(lambda: self._execute(stmt))

    async def register_type(
        self, kind: str, namespace: str, name: str, version: str, values: dict[str, Any]
    ) -> None:
        table = workflow_types if kind == "workflow" else activity_types
        row = {
            "namespace": namespace,
            "name": name,
            "version": version,
            "registered_at": naive(utcnow().timestamp()),
            **values,
        }
        # Registering again changes only the defaults it gives; the rest keep
        # their earlier values (a decider registering its task list must not
        # erase the timeouts an operator registered).
        given = {k: v for k, v in values.items() if v not in (None, "")}
        given["registered_at"] = row["registered_at"]
        keys = ["namespace", "name", "version"]
        stmt = dialect.upsert(self.is_pg, table, row, keys, update=given)

        async def attempt() -> None:
            async with self._write() as conn:
                await conn.execute(stmt)
                # Every other node forgets what it read of these types.
                await dialect.notify(
                    conn, self.is_pg, CHANGES_CHANNEL, change(self.node_id, TYPES, namespace)
                )

        try:
            await self._retrying(attempt)
        finally:
            self.types.forget(namespace)

    async def token_secret(self) -> bytes:
        """The task-token signing key: made once, shared by all nodes, kept across restarts."""
        return await self.meta_secret("token_secret")

    async def meta_secret(self, name: str) -> bytes:
        """A random key kept in server_meta under `name`: made by whichever node
        asks first, the same for every node afterwards."""

        async def attempt() -> str:
            async with self._write() as conn:
                value = await conn.scalar(
                    select(server_meta.c.value).where(server_meta.c.key == name)
                )
                if value is None:
                    value = secrets.token_hex(32)
                    await conn.execute(insert(server_meta).values(key=name, value=value))
                return str(value)

        for n in range(2):
            try:
                return bytes.fromhex(await self._retrying(attempt, unique_ok=True))
            except IntegrityError:
                if n == 1:
                    raise
        raise AssertionError("unreachable")
