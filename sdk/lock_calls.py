"""The AsyncClient's lock calls (an operator's; README "Locks"): the locks held
or waited for, and taking one from its holder."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from google.protobuf.message import Message

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.workflows import ForcedRelease, LockInfo


class LockCalls:
    """Mixed into `AsyncClient`, which provides `namespace`, `identity` and `rpc`."""

    namespace: str
    identity: str

    async def rpc(self, method: str, request: Message, *, timeout: timedelta | None = None) -> Any:
        raise NotImplementedError

    async def list_locks(self, name: str = "") -> list[LockInfo]:
        """The namespace's locks that have a holder or waiters (only `name` if given)."""
        resp = await self.rpc(
            "ListLocks", a.ListLocksRequest(namespace=self.namespace, lock_name=name)
        )
        return [LockInfo.from_proto(info) for info in resp.locks]

    async def force_release_lock(self, name: str, *, reason: str = "") -> ForcedRelease:
        """Take a lock from its holder (an operator's last resort): the holder's history
        records a forced `LockReleased` with this client's identity and the reason, and
        the next waiter gets the lock. NotFoundError if nobody holds it."""
        resp = await self.rpc(
            "ForceReleaseLock",
            a.ForceReleaseLockRequest(
                namespace=self.namespace, lock_name=name, identity=self.identity, reason=reason
            ),
        )
        return ForcedRelease(
            lock_name=name,
            released_workflow_id=resp.released_workflow_id,
            released_run_id=resp.released_run_id,
            granted_workflow_id=resp.granted_workflow_id,
            granted_run_id=resp.granted_run_id,
        )
