"""The AsyncClient's credential calls (an admin's; README "Security"): API keys
and certificate principals of a server started with `--auth`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from google.protobuf.message import Message

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.durations import duration


def check_api_key(key: str) -> None:
    """ValueError unless `key` can travel in a call's `authorization` header:
    visible ASCII (Weft's keys are; gRPC refuses anything else only once the
    call is sent, with an error that names no header)."""
    if not all("!" <= c <= "~" for c in key):
        raise ValueError(
            "the API key holds a character a gRPC header cannot carry"
            " (a key is visible ASCII, without spaces)"
        )


class CredentialCalls:
    """Mixed into `AsyncClient`, which provides `namespace` and `rpc`."""

    namespace: str

    async def rpc(self, method: str, request: Message, *, timeout: timedelta | None = None) -> Any:
        raise NotImplementedError

    async def create_api_key(
        self,
        role: str,
        *,
        namespace: str | None = None,
        task_lists: list[str] | None = None,
        workflow_types: list[str] | None = None,
        signal_names: list[str] | None = None,
        expires_after: timedelta | None = None,
        name: str = "",
    ) -> tuple[str, str]:
        """Create an API key with one grant; returns (id, key). The key is shown
        only here: the server keeps a keyed hash of it."""
        req = a.CreateApiKeyRequest(
            grant=self._grant(role, namespace, task_lists, workflow_types, signal_names),
            name=name,
            expires_after=duration(expires_after),
        )
        resp = await self.rpc("CreateApiKey", req)
        return resp.id, resp.key

    async def add_principal(
        self,
        subject: str,
        role: str,
        *,
        namespace: str | None = None,
        task_lists: list[str] | None = None,
        workflow_types: list[str] | None = None,
        signal_names: list[str] | None = None,
        expires_after: timedelta | None = None,
        name: str = "",
    ) -> str:
        """Let a client certificate whose CN or SAN is `subject` call with this
        grant (the server must require client certificates); returns its id."""
        req = a.AddPrincipalRequest(
            subject=subject,
            grant=self._grant(role, namespace, task_lists, workflow_types, signal_names),
            name=name,
            expires_after=duration(expires_after),
        )
        resp = await self.rpc("AddPrincipal", req)
        return str(resp.id)

    async def list_credentials(
        self, *, namespace: str = "", include_revoked: bool = False
    ) -> list[a.Credential]:
        """The keys and principals of the namespaces the caller administers."""
        resp = await self.rpc(
            "ListCredentials",
            a.ListCredentialsRequest(namespace=namespace, include_revoked=include_revoked),
        )
        return list(resp.credentials)

    async def revoke_credential(self, credential_id: str) -> None:
        """Revoke a key or a principal; every node refuses it within seconds."""
        await self.rpc("RevokeCredential", a.RevokeCredentialRequest(id=credential_id))

    def _grant(
        self,
        role: str,
        namespace: str | None,
        task_lists: list[str] | None,
        workflow_types: list[str] | None,
        signal_names: list[str] | None,
    ) -> a.Grant:
        return a.Grant(
            namespace=self.namespace if namespace is None else namespace,
            role=role,
            task_lists=task_lists or [],
            workflow_types=workflow_types or [],
            signal_names=signal_names or [],
        )
