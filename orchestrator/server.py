"""One orchestrator node: the gRPC service, the deadline scanner and, on
PostgreSQL, the cross-node listener, around one store."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from orchestrator.api import handlers
from orchestrator.api.admin import AdminService
from orchestrator.api.guard import Guard
from orchestrator.api.service import ServiceSettings, WorkflowService
from orchestrator.api.tokens import TokenCodec
from orchestrator.auth.gate import Authenticator, PrincipalLimits
from orchestrator.config import ServerConfig
from orchestrator.dispatch.listener import listen
from orchestrator.dispatch.pollers import FLUSH_EVERY as POLLERS_FLUSH_EVERY
from orchestrator.dispatch.pollers import PollerSightings
from orchestrator.dispatch.wakeups import Wakeups
from orchestrator.metrics import Metrics
from orchestrator.schedules.runner import ScheduleRunner
from orchestrator.store.rows import utcnow
from orchestrator.store.store import Committed, Store, TaskListKey
from orchestrator.timers.scanner import DeadlineScanner
from orchestrator.tls import ServerTls, TlsFiles
from sdk.api.weft.v1 import admin_pb2, service_pb2

log = structlog.get_logger("weft.server")
SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["WorkflowService"].full_name
ADMIN_SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
# The largest message either way; the SDK's clients receive as much
# (sdk.client.MAX_MESSAGE_BYTES, checked equal by a test).
MAX_MESSAGE = 64 * 1024 * 1024
# Seconds between looks at the TLS files' stat (between connections).
TLS_WATCH_EVERY = 5.0


class Server:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.port = 0
        self._wakeups = Wakeups()
        self._tasks: list[asyncio.Task[None]] = []
        self._grpc: grpc.aio.Server | None = None
        self._store: Store | None = None
        self._service: WorkflowService | None = None
        self._scanner: DeadlineScanner | None = None
        self._health = health.aio.HealthServicer()
        self._pollers = PollerSightings()
        self.metrics = Metrics()
        self.tls: ServerTls | None = None
        self.guard: Guard | None = None

    def _committed(self, c: Committed) -> None:
        self.metrics.events.inc(c.events)
        for key, added in c.task_lists.items():
            self._wakeups.wake_pollers(key, added)
        for run_id in c.runs_with_events:
            self._wakeups.wake(("run", run_id))
        if c.earliest_deadline is not None and self._scanner is not None:
            self._scanner.hint(c.earliest_deadline)

    async def start(self) -> int:
        reason = self.config.insecure_reason()
        if reason is not None:
            raise ValueError(reason)
        if self.config.tls_cert:
            # Before the database: bad files are refused with nothing opened.
            self.tls = ServerTls(
                TlsFiles(self.config.tls_cert, self.config.tls_key, self.config.tls_client_ca)
            )
        store = self._store = await Store.open(self.config.db_url, self._committed)
        self.metrics.count_database(store.stats)
        tokens = TokenCodec(await store.token_secret())
        settings = ServiceSettings(
            long_poll=self.config.long_poll,
            max_polls_per_client=self.config.max_polls_per_client,
            limits=self.config.limits,
            defaults=self.config.defaults,
        )
        pollers = self._pollers
        authenticator = None
        if self.config.auth:
            authenticator = Authenticator(store.credentials, await store.credentials.auth_secret())
        self.guard = Guard(
            tokens,
            authenticator,
            PrincipalLimits(
                self.config.max_polls_per_principal, self.config.max_requests_per_principal
            ),
        )
        self._service = WorkflowService(
            store, tokens, self._wakeups, settings, self.metrics, pollers, self.guard
        )
        admin = AdminService(
            store, tokens, self._wakeups, settings, self.metrics, pollers, self.guard
        )
        # A commit on this node hands its new tasks to polls waiting here.
        store.set_offer(self._service.polls.offer)
        self._tasks.append(asyncio.create_task(self._write_pollers(), name="poller-sightings"))
        self._scanner = DeadlineScanner(store, self.metrics)
        self._tasks.append(asyncio.create_task(self._scanner.run(), name="deadline-scanner"))
        admin.runner = ScheduleRunner(
            store, self._service.start, self._leads, slots=self.metrics.schedule_slots
        )
        self._tasks.append(asyncio.create_task(admin.runner.run(), name="schedules"))
        if self.config.purge_interval > 0:
            self._tasks.append(asyncio.create_task(self._purge_loop(), name="retention-purge"))
        if store.is_pg:
            ready = asyncio.Event()
            self._tasks.append(
                asyncio.create_task(
                    listen(
                        self.config.db_url,
                        self._on_notify,
                        self._lost_notifications,
                        ready,
                        own_node=store.node_id,
                        on_change=self._on_change,
                    ),
                    name="pg-listener",
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), 10)

        server = self._grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
                # A second node on a taken port must fail, not share it; the
                # workers of `--workers N` share it on purpose.
                ("grpc.so_reuseport", 1 if self.config.reuse_port else 0),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ]
        )
        services = service_pb2.DESCRIPTOR.services_by_name
        handlers.register(server, self._service, services["WorkflowService"])
        handlers.register(server, admin, admin_pb2.DESCRIPTOR.services_by_name["AdminService"])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, ADMIN_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
            server,
        )
        if self.tls is not None:
            self.port = server.add_secure_port(self.config.listen, self.tls.credentials())
        else:
            self.port = server.add_insecure_port(self.config.listen)
        if not self.port:
            raise OSError(f"cannot listen on {self.config.listen}")
        await server.start()
        if self.config.metrics_listen:
            self.metrics.serve(self.config.metrics_listen, self.tls.files if self.tls else None)
        if self.tls is not None:
            self.tls.on_reload(self.metrics.reload_tls)
            self._tasks.append(asyncio.create_task(self._watch_tls(), name="tls-watch"))
        for name in ("", SERVICE_NAME, ADMIN_SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "server.started",
            listen=self.config.listen,
            port=self.port,
            tls="mutual" if self.tls and self.tls.mutual else "on" if self.tls else "off",
            auth="required" if self.config.auth else "off",
            db=_safe(self.config.db_url),
        )
        return self.port

    def reload_tls(self) -> None:
        """SIGHUP: read the certificate files again (new connections get them)."""
        if self.tls is not None:
            self.tls.check(force=True)

    async def _watch_tls(self) -> None:
        """Look at the files every few seconds too: gRPC asks only when a
        connection comes, and the metrics endpoint never asks."""
        assert self.tls is not None
        while True:
            await asyncio.sleep(TLS_WATCH_EVERY)
            await asyncio.to_thread(self.tls.check)

    def _leads(self) -> bool:
        """Whether this node does the upkeep that must not run twice (schedules)."""
        return True  # replaced by the node lease

    async def _purge_loop(self) -> None:
        """Delete closed runs their retention no longer keeps, every purge interval.
        Every node runs this; on PostgreSQL an advisory lock lets one at a time work."""
        assert self._store is not None
        while True:
            await asyncio.sleep(self.config.purge_interval)
            try:
                purged = await self._store.purge_closed(utcnow())
            except Exception as exc:  # the database may be away: try again next time
                log.warning("retention.purge_failed", error=str(exc)[:200])
                continue
            if purged:
                log.info("retention.purged", runs=purged)

    async def _write_pollers(self) -> None:
        """Write who polled, every few seconds, in one transaction."""
        assert self._store is not None
        while True:
            await asyncio.sleep(POLLERS_FLUSH_EVERY)
            rows = self._pollers.take_unwritten()
            try:
                await self._store.record_pollers(rows)
            except Exception as exc:  # the database may be away: keep them for next time
                self._pollers.put_back(rows)
                log.warning("pollers.write_failed", error=str(exc)[:200])

    def _on_change(self, kind: str, subject: str) -> None:
        """Another node's news: a namespace's types were registered anew, a
        credential was revoked, or a run closed (its followers here read its
        last events now)."""
        if kind == "types" and self._store is not None:
            self._store.types.forget(subject)
        elif kind == "credentials" and self.guard is not None:
            self.guard.forget(subject)
        elif kind == "closed":
            self._wakeups.wake(("run", subject))

    def _on_notify(self, key: TaskListKey, added: int) -> None:
        self._wakeups.wake_pollers(key, added)

    def _lost_notifications(self) -> None:
        """The link to the other nodes was (re)made: what came meanwhile is lost,
        so every waiter looks again and nothing read from other nodes is trusted."""
        self._wakeups.wake_all()
        if self._store is not None:
            self._store.types.clear()
        if self.guard is not None:
            self.guard.forget_all()

    async def wait(self) -> None:
        assert self._grpc is not None
        await self._grpc.wait_for_termination()

    async def stop(self, grace: float | None = None) -> None:
        """Drain: refuse new polls, answer waiting ones empty, let in-flight calls finish."""
        grace = self.config.drain_grace if grace is None else grace
        if self._service is not None:
            self._service.draining = True
        self._wakeups.wake_all()
        await self._health.enter_graceful_shutdown()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._store is not None:
            await self._store.close()
        log.info("server.stopped")


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
