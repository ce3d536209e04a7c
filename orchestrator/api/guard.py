"""What every call passes through before its handler (`errors.grpc_errors`):
who the caller is, whether their grant covers this call on what it touches,
the per-principal limits, and the audit line of the calls that need one.

With authentication off (a loopback server without `--auth`) only the audit
lines remain; every caller may do everything, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

import grpc
import structlog

from orchestrator.auth.gate import Authenticator, Caller, PrincipalLimits
from orchestrator.auth.grants import AUDITED, Refused, Scope
from orchestrator.engine import caller
from orchestrator.engine.errors import PermissionDenied, Unauthenticated

from . import validate
from .in_process import CallContext
from .tokens import TokenCodec

audit_log = structlog.get_logger("weft.audit")
Ctx = grpc.aio.ServicerContext[Any, Any]

# The whole caller, for the handlers that decide by its grants (credentials).
_caller: ContextVar[Caller | None] = ContextVar("weft_caller", default=None)


def current_caller() -> Caller | None:
    """The authenticated caller of the call being served (None: authentication is off)."""
    return _caller.get()


_POLLS = frozenset({"PollForDecisionTask", "PollForActivityTask"})
_TOKEN_KINDS = {
    "RespondDecisionTaskCompleted": "decision",
    "RespondDecisionTaskFailed": "decision",
    "RecordActivityHeartbeat": "activity",
    "RespondActivityTaskCompleted": "activity",
    "RespondActivityTaskFailed": "activity",
    "RespondActivityTaskCanceled": "activity",
}
# Namespace fields other than `namespace`.
_NAMESPACE_NAMED = frozenset({"RegisterNamespace", "DescribeNamespace"})
# Calls on credentials: the namespace is the grant's, checked by the handler.
_CREDENTIALS = frozenset({"CreateApiKey", "AddPrincipal", "ListCredentials", "RevokeCredential"})


class Guard:
    def __init__(
        self, tokens: TokenCodec, authenticator: Authenticator | None, limits: PrincipalLimits
    ) -> None:
        self._tokens = tokens
        self._authenticator = authenticator
        self._limits = limits

    def forget(self, credential_id: str) -> None:
        if self._authenticator is not None:
            self._authenticator.forget(credential_id)

    def forget_all(self) -> None:
        if self._authenticator is not None:
            self._authenticator.forget_all()

    async def authenticate(self, ctx: Ctx) -> None:
        """Raise UNAUTHENTICATED unless the caller's credentials hold (or
        authentication is off): what a lane checks before it is served, so that
        no one without credentials holds a stream open. Each call on it is
        still let in by `admit`."""
        if self._authenticator is not None:
            await self._authenticator.caller(_authorization(ctx), _subjects(ctx))

    @asynccontextmanager
    async def admit(self, rpc: str, request: Any, ctx: Ctx) -> AsyncIterator[Caller | None]:
        """Let the call in (as its caller, stamped on what it appends) or raise
        UNAUTHENTICATED / PERMISSION_DENIED / RESOURCE_EXHAUSTED before it does anything."""
        who: Caller | None = None
        outcome = "refused"
        try:
            if self._authenticator is not None:
                who = _in_process_caller(ctx) or await self._authenticator.caller(
                    _authorization(ctx), _subjects(ctx)
                )
                self._limits.spend(who.principal)  # refused calls count too
                scope = await self._scope(rpc, request)
                try:
                    who.check(rpc, scope)
                except Refused as exc:
                    raise PermissionDenied(str(exc)) from None
            token = caller.principal.set(who.principal if who else "")
            whole = _caller.set(who)
            outcome = "failed"  # let in; set to "ok" if the handler returns
            try:
                waits = rpc in _POLLS or (rpc == "GetWorkflowHistory" and request.wait_new_event)
                if who is not None and waits:
                    with self._limits.poll(who.principal):
                        yield who
                else:
                    yield who
                outcome = "ok"
            finally:
                caller.principal.reset(token)
                _caller.reset(whole)
        finally:
            if rpc in AUDITED:
                _audit(rpc, request, who, ctx, outcome)

    async def _scope(self, rpc: str, req: Any) -> Scope:
        """What the call touches, as far as grants care, from the request alone.
        What only the run knows (its type, its task list) is checked where the
        handler has the run: `check_run`."""
        if rpc in _CREDENTIALS or rpc in ("PurgeClosedRuns", "ListNodes"):
            return Scope()
        if rpc in _TOKEN_KINDS:
            token = self._tokens.decode(req.task_token, _TOKEN_KINDS[rpc])
            return Scope(namespace=token.key.namespace, task_list=token.task_list)
        if rpc in _NAMESPACE_NAMED:
            return Scope(namespace=validate.namespace(req.name))
        if rpc == "SignalWithStartWorkflow":
            return Scope(
                namespace=validate.namespace(req.start.namespace),
                workflow_type=req.start.workflow_type.name,
                signal_name=req.signal_name,
            )
        ns = validate.namespace(req.namespace)
        if rpc in _POLLS or rpc == "DescribeTaskList":
            return Scope(namespace=ns, task_list=req.task_list)
        if rpc == "ListWorkers":
            return Scope(namespace=ns, task_list=req.task_list or None)
        if rpc in ("RegisterWorkflowType", "RegisterActivityType"):
            # A worker narrowed to task lists registers types on those lists only.
            return Scope(namespace=ns, task_list=req.default_task_list)
        if rpc == "StartWorkflow":
            return Scope(namespace=ns, workflow_type=req.workflow_type.name)
        if rpc == "SignalWorkflow":
            return Scope(namespace=ns, signal_name=req.signal_name)
        return Scope(namespace=ns)

    @contextmanager
    def folded_poll(self) -> Iterator[None]:
        """A poll folded into a worker's answer counts against its principal's
        limit of waiting polls, as a poll of its own would (RESOURCE_EXHAUSTED
        past it). Its grant is checked with the answer (`check_run`)."""
        who = _caller.get()
        if who is None:
            yield
            return
        with self._limits.poll(who.principal):
            yield

    def still_admitted(self, who: Caller | None) -> None:
        """Raise UNAUTHENTICATED if a caller admitted earlier (a poll waiting for
        work) has since had its credential revoked, changed or expired."""
        auth = self._authenticator
        if who is not None and auth is not None and not auth.still_valid(who):
            raise Unauthenticated(
                f"the credentials of {who.principal} were revoked, changed or expired"
                " while the poll waited; poll again"
            )


def check_run(
    rpc: str, namespace: str, workflow_type: str | None = None, task_list: str | None = None
) -> None:
    """The grant's narrowing by what only the run knows, checked by the handler on
    the run it acts on (inside its transaction where it writes), or by what only
    the request's body says (a poll folded into an answer): PERMISSION_DENIED
    outside it. Nothing without authentication."""
    who = _caller.get()
    if who is None:
        return
    try:
        who.check(rpc, Scope(namespace=namespace, workflow_type=workflow_type, task_list=task_list))
    except Refused as exc:
        raise PermissionDenied(str(exc)) from None


def _in_process_caller(ctx: object) -> Caller | None:
    """The caller an in-process call was made as (`--embed` under `--auth`).
    (`ctx` as object: a lane's or an in-process call's is no gRPC context.)"""
    return ctx.caller if isinstance(ctx, CallContext) else None


def _authorization(ctx: Ctx) -> str:
    for key, value in ctx.invocation_metadata() or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode(errors="replace")
    return ""


def _subjects(ctx: Ctx) -> list[str]:
    """A verified client certificate's common name and subject alternative names
    (gRPC fills these in only after verifying the chain against the client CA)."""
    auth = ctx.auth_context() or {}
    found: list[str] = []
    for field in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth.get(field, ()):
            text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            if text and text not in found:
                found.append(text)
    return found


def _namespace_of(rpc: str, req: Any) -> str:
    if rpc in _NAMESPACE_NAMED:
        return str(req.name) or validate.DEFAULT_NAMESPACE
    grant = getattr(req, "grant", None)
    if grant is not None:
        return str(grant.namespace)
    if rpc in ("RevokeCredential", "PurgeClosedRuns"):
        return ""  # (the credential's namespace is in the handler's log line)
    return str(getattr(req, "namespace", "")) or validate.DEFAULT_NAMESPACE


def _audit(rpc: str, req: Any, who: Caller | None, ctx: Ctx, outcome: str) -> None:
    execution = getattr(req, "execution", None)
    audit_log.info(
        "audit",
        rpc=rpc,
        outcome=outcome,
        principal=who.principal if who else "",
        identity=getattr(req, "identity", ""),
        namespace=_namespace_of(rpc, req),
        workflow_id=execution.workflow_id if execution is not None else "",
        run_id=execution.run_id if execution is not None else "",
        lock=getattr(req, "lock_name", ""),
        credential=getattr(req, "id", ""),
        peer=ctx.peer(),
    )
