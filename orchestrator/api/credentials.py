"""AdminService's credential calls: create API keys and certificate
principals, list them, revoke them. An admin of a namespace manages that
namespace's credentials; only an admin of "*" makes or sees "*" ones."""

from __future__ import annotations

from datetime import timedelta

import structlog

from orchestrator.auth import keys
from orchestrator.auth.gate import Caller
from orchestrator.auth.grants import ADMIN, EVERY_NAMESPACE, ROLES, SIGNALER, STARTER, WORKER
from orchestrator.engine import caller as current
from orchestrator.engine.errors import InvalidArgument, NotFound, PermissionDenied
from orchestrator.store.credentials import CERTIFICATE, KEY, CredentialRow
from orchestrator.store.rows import utcnow
from sdk.api.weft.v1 import admin_pb2 as a

from . import validate
from .common import Ctx, ServiceBase, timestamp
from .errors import grpc_errors
from .guard import current_caller

log = structlog.get_logger("weft.api")

# Which roles a narrowing means something to; anything else is refused, not ignored.
_NARROWS = {
    "task_lists": frozenset({WORKER}),
    "workflow_types": frozenset({STARTER, SIGNALER}),
    "signal_names": frozenset({SIGNALER}),
}


def administers(who: Caller | None, namespace: str) -> bool:
    """Whether the caller is an admin of `namespace` (no caller: authentication is off)."""
    if who is None:
        return True
    return any(g.role == ADMIN and g.namespace in (EVERY_NAMESPACE, namespace) for g in who.grants)


def _grant_fields(grant: a.Grant) -> dict[str, object]:
    """The grant, checked: a known role, a namespace ("*" for admin only), and
    only the narrowings that mean something to the role."""
    if grant.role not in ROLES:
        raise InvalidArgument(f"grant.role must be one of {', '.join(ROLES)}, not {grant.role!r}")
    if grant.namespace == EVERY_NAMESPACE:
        if grant.role != ADMIN:
            raise InvalidArgument("only an admin grant may be for every namespace ('*')")
        namespace = EVERY_NAMESPACE
    else:
        namespace = validate.namespace(grant.namespace)
    fields: dict[str, object] = {"namespace": namespace, "role": grant.role}
    for attribute, roles in _NARROWS.items():
        values = tuple(getattr(grant, attribute))
        if values and grant.role not in roles:
            raise InvalidArgument(f"grant.{attribute} does not apply to role {grant.role!r}")
        for value in values:
            validate.name(f"grant.{attribute}", value)
        fields[attribute] = tuple(sorted(set(values)))
    return fields


def _credential(row: CredentialRow) -> a.Credential:
    out = a.Credential(
        id=row.id,
        kind=row.kind,
        subject=row.subject,
        name=row.name,
        grant=a.Grant(
            namespace=row.namespace,
            role=row.role,
            task_lists=row.task_lists,
            workflow_types=row.workflow_types,
            signal_names=row.signal_names,
        ),
        created_at=timestamp(row.created_at),
        created_by=row.created_by,
    )
    if row.expires_at is not None:
        out.expires_at.CopyFrom(timestamp(row.expires_at))
    if row.revoked_at is not None:
        out.revoked_at.CopyFrom(timestamp(row.revoked_at))
    return out


class CredentialsAdmin(ServiceBase):
    async def _new_row(
        self,
        credential_id: str,
        kind: str,
        subject: str,
        secret_hash: str,
        req: a.CreateApiKeyRequest | a.AddPrincipalRequest,
        ctx: Ctx,
    ) -> CredentialRow:
        fields = _grant_fields(req.grant)
        if not administers(current_caller(), str(fields["namespace"])):
            raise PermissionDenied(
                f"{current.principal.get()} is not an admin of namespace {fields['namespace']!r}"
            )
        if len(req.name) > validate.NAME_LENGTH:
            raise InvalidArgument(f"name is longer than {validate.NAME_LENGTH} characters")
        expires = validate.optional_seconds(req, "expires_after")
        now = utcnow()
        return CredentialRow(
            id=credential_id,
            kind=kind,
            subject=subject,
            secret_hash=secret_hash,
            name=req.name,
            created_at=now,
            created_by=(current.principal.get() or f"unauthenticated {ctx.peer()}")[
                : validate.NAME_LENGTH
            ],
            expires_at=now + timedelta(seconds=expires) if expires else None,
            **fields,  # type: ignore[arg-type]
        )

    @grpc_errors
    async def CreateApiKey(self, req: a.CreateApiKeyRequest, ctx: Ctx) -> a.CreateApiKeyResponse:
        key_id, secret, key = keys.new_key()
        digest = keys.keyed_hash(await self._store.credentials.auth_secret(), secret)
        row = await self._new_row(key_id, KEY, "", digest, req, ctx)
        await self._store.credentials.add(row)
        log.info("credential.created", id=key_id, namespace=row.namespace, role=row.role)
        return a.CreateApiKeyResponse(id=key_id, key=key)

    @grpc_errors
    async def AddPrincipal(self, req: a.AddPrincipalRequest, ctx: Ctx) -> a.AddPrincipalResponse:
        subject = validate.name("subject", req.subject)
        principal_id = keys.new_id(keys.PRINCIPAL_ID_PREFIX)
        row = await self._new_row(principal_id, CERTIFICATE, subject, "", req, ctx)
        await self._store.credentials.add(row)
        self.guard.forget(principal_id)  # subjects looked up before may now match
        log.info("credential.created", id=principal_id, namespace=row.namespace, role=row.role)
        return a.AddPrincipalResponse(id=principal_id)

    @grpc_errors
    async def ListCredentials(
        self, req: a.ListCredentialsRequest, ctx: Ctx
    ) -> a.ListCredentialsResponse:
        who = current_caller()
        wanted = None
        if req.namespace:
            ns = (
                req.namespace
                if req.namespace == EVERY_NAMESPACE
                else validate.namespace(req.namespace)
            )
            if not administers(who, ns):
                raise PermissionDenied(
                    f"{current.principal.get()} is not an admin of namespace {ns!r}"
                )
            wanted = [ns]
        rows = await self._store.credentials.find(wanted)
        shown = [
            r
            for r in rows
            if administers(who, r.namespace) and (req.include_revoked or r.revoked_at is None)
        ]
        return a.ListCredentialsResponse(credentials=[_credential(r) for r in shown])

    @grpc_errors
    async def RevokeCredential(
        self, req: a.RevokeCredentialRequest, ctx: Ctx
    ) -> a.RevokeCredentialResponse:
        validate.name("id", req.id, 64)
        row = await self._store.credentials.get(req.id)
        if row is None or not administers(current_caller(), row.namespace):
            # Not "denied": ids of other namespaces' credentials are not told apart.
            raise NotFound(f"no credential {req.id!r} that you administer")
        await self._store.credentials.revoke(req.id, utcnow())
        self.guard.forget(req.id)
        log.info("credential.revoked", id=req.id, namespace=row.namespace)
        return a.RevokeCredentialResponse()
