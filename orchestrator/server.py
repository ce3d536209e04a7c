"""One orchestrator node: the gRPC service, the deadline scanner, its row in
`nodes` and, on PostgreSQL, the cross-node listener, around one store; and,
while it holds the upkeep lease, the work one node at a time does (the
retention purge, the worker-session reaper)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from orchestrator.api import handlers, lanes
from orchestrator.api.admin import AdminService
from orchestrator.api.direct_lanes import DirectLanes
from orchestrator.api.doctor import Doctor
from orchestrator.api.guard import Guard
from orchestrator.api.in_process import InProcessServices
from orchestrator.api.service import ServiceSettings, WorkflowService
from orchestrator.api.tokens import TokenCodec
from orchestrator.auth.gate import Authenticator, PrincipalLimits
from orchestrator.config import ServerConfig
from orchestrator.diagnostics.findings import KINDS
from orchestrator.dispatch.follow import follow_key
from orchestrator.dispatch.listener import listen
from orchestrator.dispatch.pollers import FLUSH_EVERY as POLLERS_FLUSH_EVERY
from orchestrator.dispatch.pollers import PollerSightings
from orchestrator.dispatch.sessions import FLUSH_EVERY as SESSIONS_FLUSH_EVERY
from orchestrator.dispatch.sessions import SessionBook
from orchestrator.dispatch.wakeups import Wakeups
from orchestrator.metrics import Metrics
from orchestrator.schedules.runner import ScheduleRunner
from orchestrator.store import dialect, notices
from orchestrator.store import nodes as node_rows
from orchestrator.store.node_lock import SqliteNodeLock
from orchestrator.store.rows import utcnow
from orchestrator.store.store import Committed, Store, TaskListKey
from orchestrator.timers.scanner import DeadlineScanner
from orchestrator.tls import ServerTls, TlsFiles
from orchestrator.upkeep.leader import Leadership
from orchestrator.upkeep.membership import Membership, default_node_name
from orchestrator.upkeep.reaper import Reaper
from sdk import event_loops
from sdk.api.weft.v1 import admin_pb2, service_pb2

log = structlog.get_logger("weft.server")
SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["WorkflowService"].full_name
ADMIN_SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
# The largest message either way; the SDK's clients receive as much
# (sdk.client.MAX_MESSAGE_BYTES, checked equal by a test).
MAX_MESSAGE = 64 * 1024 * 1024
# Seconds between looks at the TLS files' stat (between connections).
TLS_WATCH_EVERY = 5.0
REAP_EVERY = 1.0  # seconds between the leader's looks for lost worker sessions
PRUNE_EVERY = 600.0  # seconds between deletions of long-ended sessions and nodes


class Server:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.port = 0
        self._wakeups = Wakeups()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # Why one of the node's loops ended on its own, once one has.
        self.fault: str | None = None
        self._faulted = asyncio.Event()
        self._grpc: grpc.aio.Server | None = None
        self._store: Store | None = None
        self._node_lock: SqliteNodeLock | None = None
        self._service: WorkflowService | None = None
        self._lanes: lanes.Lanes | None = None
        self._direct: DirectLanes | None = None
        self._admin: AdminService | None = None
        self._scanner: DeadlineScanner | None = None
        self._health = health.aio.HealthServicer()
        self._pollers = PollerSightings()
        self._sessions = SessionBook()
        self._membership: Membership | None = None
        self._leadership: Leadership | None = None
        self.metrics = Metrics()
        self.tls: ServerTls | None = None
        self.guard: Guard | None = None

    def _run_loop(self, body: Coroutine[Any, Any, None], name: str) -> None:
        """Run one of the node's loops until the stop. Each catches what the
        database throws and goes on, so one that ends before the stop is a
        fault (a bug): said, and the node's `wait_for_fault` returns, rather
        than the node serving on without it (no deadline fired, no lease kept)."""
        task = asyncio.create_task(body, name=name)
        task.add_done_callback(self._loop_ended)
        self._tasks.append(task)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        name = task.get_name()
        error = None if task.cancelled() else task.exception()
        if self._stopping:  # cancelled by the stop, as it should be
            if error is not None:  # (but it failed on its way out)
                log.error("server.loop_failed_at_stop", loop=name, exc_info=error)
            return
        if task.cancelled():
            why = f"its {name} loop was cancelled"
        elif error is not None:
            why = f"its {name} loop stopped: {error!r}"
        else:
            why = f"its {name} loop returned"
        log.error("server.loop_ended", loop=name, reason=why, exc_info=error)
        if self.fault is None:  # (the first says why the node stops)
            self.fault = why
            self._faulted.set()

    async def wait_for_fault(self) -> str:
        """Wait until one of the node's loops has ended before the stop; why."""
        await self._faulted.wait()
        assert self.fault is not None
        return self.fault

    def _committed(self, c: Committed) -> None:
        self.metrics.events.inc(c.events)
        for key, added in c.task_lists.items():
            self._wakeups.wake_pollers(key, added)
        for run_id in c.runs_with_events:
            self._wakeups.wake(follow_key(run_id))
        if c.earliest_deadline is not None and self._scanner is not None:
            self._scanner.hint(c.earliest_deadline)

    async def start(self, before_serving: Callable[[], Awaitable[bool]] | None = None) -> int:
        """Open the store, join the cluster and listen; `before_serving` runs
        once the node's services answer (in process) and before its health
        check says SERVING (`weft server --embed`: the embedded workers'
        registrations), which it says only if that returns True. Returns the
        port."""
        try:
            return await self._start(before_serving)
        except BaseException:
            # Nothing half-started is left, before the error goes up: the
            # listener stops, the node's row says gone and its lease is let go
            # (a start that failed is no unexpected shutdown, and another node
            # need not wait out the lease to lead), the loops end (not as
            # faults) and the store is closed. What fails in that is logged:
            # the caller gets the start's error, which says why it failed.
            self._stopping = True
            try:
                try:
                    await self._drain(0)
                finally:
                    await self._release()
            except Exception as exc:
                log.error("server.start_undo_failed", exc_info=exc)
            raise

    async def _start(self, before_serving: Callable[[], Awaitable[bool]] | None) -> int:
        reason = self.config.insecure_reason()
        if reason is not None:
            raise ValueError(reason)
        if self.config.tls_cert:
            # Before the database: bad files are refused with nothing opened.
            self.tls = ServerTls(
                TlsFiles(self.config.tls_cert, self.config.tls_key, self.config.tls_client_ca)
            )
        sqlite_file = dialect.sqlite_path(self.config.db_url)
        if sqlite_file is not None:  # (one node on SQLite: a second is refused here)
            self._node_lock = SqliteNodeLock.take(sqlite_file)
        # Group commit only in a node of one process: with `--workers N` on one
        # machine, groups made more tasks go from process to process through
        # the database (bench.hotpath --server-workers 2, 2026-11-27: 340 to 370
        # activities a second against 385 to 460, and 7 statements per activity
        # against 3 to 5).
        store = self._store = await Store.open(
            self.config.db_url, self._committed, group_commit=self.config.port_processes == 1
        )
        self.metrics.count_database(store.stats)
        tokens = TokenCodec(await store.token_secret())
        settings = ServiceSettings(
            long_poll=self.config.long_poll,
            folded_poll=self.config.folded_poll,
            max_polls_per_client=self.config.max_polls_per_client,
            limits=self.config.limits,
            defaults=self.config.defaults,
            session_timeout=self.config.worker_session_timeout,
            lease_period=self.config.lease_period,
        )
        pollers, sessions = self._pollers, self._sessions
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
        parts = (self._wakeups, settings, self.metrics, pollers, self.guard, sessions)
        self._service = WorkflowService(store, tokens, *parts)
        admin = self._admin = AdminService(store, tokens, *parts)
        # A commit on this node hands its new tasks to polls waiting here.
        store.set_offer(self._service.polls.offer)
        self._run_loop(self._write_pollers(), "poller-sightings")
        self._scanner = DeadlineScanner(store, self.metrics)
        self._run_loop(self._scanner.run(), "deadline-scanner")
        self._run_loop(self._write_worker_runs(), "worker-runs")
        if self.config.diagnose_interval > 0:
            doctor = Doctor(store, pollers, self.config.limits)
            self._run_loop(self._diagnose_loop(doctor), "diagnose")
        admin.runner = ScheduleRunner(
            store, self._service.start, self._leads, slots=self.metrics.schedule_slots
        )
        self._run_loop(admin.runner.run(), "schedules")
        if store.is_pg:
            ready = asyncio.Event()
            self._run_loop(
                listen(
                    self.config.db_url,
                    self._on_notify,
                    self._lost_notifications,
                    ready,
                    own_node=store.node_id,
                    on_change=self._on_change,
                ),
                "pg-listener",
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
                # A lane idle on a connection whose client vanished (no FIN)
                # would hold its count against the client's host until gRPC's
                # default ping at two hours: ping after a minute of silence.
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.keepalive_timeout_ms", 20_000),
            ]
        )
        services = service_pb2.DESCRIPTOR.services_by_name
        handlers.register(server, self._service, services["WorkflowService"])
        self._lanes = lanes.Lanes(self._service, services["WorkflowService"])
        lanes.register(server, self._lanes)
        direct_host = self.config.direct_lanes_host()
        if direct_host is not None:
            direct = DirectLanes(self._lanes, MAX_MESSAGE)
            try:
                self._lanes.offer_direct(await direct.open(direct_host), direct.key)
                self._direct = direct
            except OSError as exc:  # (no such loopback here, say: gRPC lanes do)
                log.warning("direct_lanes.unavailable", host=direct_host, error=str(exc))
        handlers.register(server, admin, admin_pb2.DESCRIPTOR.services_by_name["AdminService"])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = [SERVICE_NAME, ADMIN_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME]
        reflection.enable_server_reflection([*names, lanes.SERVICE.full_name], server)
        if self.tls is not None:
            self.port = server.add_secure_port(self.config.listen, self.tls.credentials())
        else:
            self.port = server.add_insecure_port(self.config.listen)
        if not self.port:
            raise OSError(f"cannot listen on {self.config.listen}")
        await self._join(store)
        for name in ("", SERVICE_NAME, ADMIN_SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        if self.config.metrics_listen:
            try:
                self.metrics.serve(self.config.metrics_listen, self.tls.files if self.tls else None)
            except OSError as exc:  # (a taken port: say which listener)
                said = exc.strerror or str(exc)
                raise OSError(
                    f"cannot serve metrics on {self.config.metrics_listen}: {said}"
                ) from exc
        if self.tls is not None:
            self.tls.on_reload(self.metrics.reload_tls)
            self._run_loop(self._watch_tls(), "tls-watch")
        assert self._membership is not None
        await self._membership.become(node_rows.READY)
        serving = before_serving is None or await before_serving()
        if serving:
            for name in ("", SERVICE_NAME, ADMIN_SERVICE_NAME):
                await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "server.started",
            listen=self.config.listen,
            port=self.port,
            tls="mutual" if self.tls and self.tls.mutual else "on" if self.tls else "off",
            auth="required" if self.config.auth else "off",
            serving=serving,
            db=dialect.display_url(self.config.db_url),
            node=self._membership.node_id,
            event_loop=event_loops.running(),
        )
        return self.port

    def in_process(self) -> InProcessServices:
        """This node's services for clients in its own process (`--embed`): they
        may be handed out before `start`, and called after it."""
        return InProcessServices(self._servicers)

    def _servicers(self) -> tuple[WorkflowService, AdminService]:
        if self._service is None or self._admin is None:
            raise RuntimeError("the node has not started")
        return self._service, self._admin

    async def _join(self, store: Store) -> None:
        """Write this node's row (starting), try for the upkeep lease once, and
        start the loops that keep both and do the leader's upkeep."""
        name = self.config.node_name or default_node_name(self.config.listen, self.port)
        if self._lanes is not None:
            self._lanes.place(name, self.config.port_processes)
        self._membership = Membership(store, name, self.config.listen)
        await self._membership.arrive()
        self._leadership = Leadership(store, name, self.config.lease_period)
        await self._renew_lease()
        self._run_loop(self._keep_membership(), "membership")
        reaper = Reaper(store, self.metrics, self._session_ended)
        self._run_loop(self._reap_loop(reaper), "worker-reaper")
        if self.config.purge_interval > 0:
            self._run_loop(self._purge_loop(), "retention-purge")

    def _leads(self) -> bool:
        """Whether this node does the upkeep that must not run twice at once now."""
        return self._leadership is not None and self._leadership.leads()

    async def _renew_lease(self) -> None:
        assert self._leadership is not None
        try:
            leads = await self._leadership.renew()
        except Exception as exc:  # the database is away: lead no more until it is back
            self._leadership.forget()
            leads = False
            log.warning("leader.renew_failed", error=str(exc)[:200])
        self.metrics.leader.set(1 if leads else 0)

    async def _keep_membership(self) -> None:
        """Renew the lease (or try for it) and beat, every third of a lease period."""
        assert self._membership is not None
        while True:
            await asyncio.sleep(self.config.lease_period / 3)
            await self._renew_lease()
            try:
                await self._membership.beat()
            except Exception as exc:
                log.warning("node.beat_failed", error=str(exc)[:200])

    async def _reap_loop(self, reaper: Reaper) -> None:
        """While this node leads: find lost worker sessions and time out their tasks.

        Before the first pass as leader, and after a pass that failed (the
        database was away), every live session gets its whole timeout anew:
        while no node could record their heartbeats (the service or its database
        down, no leader), live workers beat in vain and must not be judged lost
        for it."""
        assert self._store is not None
        pruned = 0.0
        loop = asyncio.get_running_loop()
        owe_grace = True
        while True:
            await asyncio.sleep(REAP_EVERY)
            if not self._leads():
                owe_grace = True
                continue
            try:
                if owe_grace:
                    await self._store.workers.grace(utcnow())
                    owe_grace = False
                await reaper.reap()
                if loop.time() - pruned > PRUNE_EVERY:
                    now = utcnow()
                    await self._store.workers.prune(now)
                    await self._store.nodes.prune(now)
                    pruned = loop.time()
            except Exception as exc:  # the database may be away: try again next time
                owe_grace = True
                log.warning("workers.reap_failed", error=str(exc)[:200])

    def _session_ended(self, session_id: str) -> None:
        self._sessions.ended(session_id)

    async def _write_worker_runs(self) -> None:
        """Write which sessions started tasks in which runs, every second."""
        assert self._store is not None
        while True:
            await asyncio.sleep(SESSIONS_FLUSH_EVERY)
            pairs = self._sessions.take_unwritten()
            try:
                await self._store.workers.record_runs(pairs)
            except Exception as exc:  # the database may be away: keep them for next time
                self._sessions.put_back(pairs)
                log.warning("worker_runs.write_failed", error=str(exc)[:200])

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

    async def _purge_loop(self) -> None:
        """Delete closed runs their retention no longer keeps, every purge interval,
        while this node leads (and, on PostgreSQL, under an advisory lock as well)."""
        assert self._store is not None
        while True:
            await asyncio.sleep(self.config.purge_interval)
            if not self._leads():
                continue
            try:
                purged = await self._store.purge_closed(utcnow())
            except Exception as exc:  # the database may be away: try again next time
                log.warning("retention.purge_failed", error=str(exc)[:200])
                continue
            if purged:
                log.info("retention.purged", runs=purged)

    async def _diagnose_loop(self, doctor: Doctor) -> None:
        """Count stuck runs by kind over every namespace with open runs, for the
        `weft_stuck_findings` gauge (read-only, bounded queries; see `weft doctor`).
        The leader counts for the cluster; the other nodes report 0."""
        assert self._store is not None
        while True:
            await asyncio.sleep(self.config.diagnose_interval)
            counts = dict.fromkeys(KINDS, 0)
            try:
                for namespace in await self._namespaces_to_diagnose():
                    found, _ = await doctor.namespace(namespace)
                    for finding in found:
                        counts[finding.kind] += 1
            except Exception as exc:  # the database may be away: keep the last counts
                log.warning("diagnose.failed", error=str(exc)[:200])
                continue
            for kind, n in counts.items():
                self.metrics.stuck.labels(kind).set(n)

    async def _namespaces_to_diagnose(self) -> list[str]:
        """Every namespace with open runs on the leader, none elsewhere: one node
        pays for the queries (aggregate the gauge with max())."""
        assert self._store is not None
        return await self._store.diagnostics.active_namespaces() if self._leads() else []

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
        if kind == notices.TYPES and self._store is not None:
            self._store.types.forget(subject)
        elif kind == notices.CREDENTIALS and self.guard is not None:
            self.guard.forget(subject)
        elif kind == notices.CLOSED:
            self._wakeups.wake(follow_key(subject))
        elif kind == notices.WORKER:
            self._sessions.ended(subject)

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
        self._stopping = True
        try:
            await self._drain(grace)
        finally:
            await self._release()  # whatever failed above
        log.info("server.stopped")

    async def _drain(self, grace: float) -> None:
        if self._service is not None:
            self._service.draining = True
        await self._say(node_rows.DRAINING)
        self._wakeups.wake_all()
        if self._lanes is not None:
            self._lanes.close()
        if self._direct is not None:
            self._direct.close()
        await self._health.enter_graceful_shutdown()
        await asyncio.gather(
            *([] if self._grpc is None else [self._grpc.stop(grace)]),
            *([] if self._direct is None else [self._direct.wait_closed(grace)]),
        )
        await self._end_loops()
        if self._store is not None:
            # What this node's polls started, so the reaper knows where to look.
            pairs = self._sessions.take_unwritten()
            with contextlib.suppress(Exception):
                await self._store.workers.record_runs(pairs)
        if self._leadership is not None:
            with contextlib.suppress(Exception):
                await self._leadership.release()
        await self._say(node_rows.GONE)

    async def _release(self) -> None:
        """End the loops and close the store: the writer's callers are answered
        and its connections closed, not left to the event loop's final sweep."""
        try:
            if self._direct is not None:  # (a start that failed after it opened)
                self._direct.close()
                await self._direct.wait_closed(0)
            await self._end_loops()
            if self._store is not None:
                await self._store.close()
        finally:
            if self._node_lock is not None:
                self._node_lock.release()  # (after the close: the file is no longer written)

    async def _end_loops(self) -> None:
        """Cancel the node's loops and wait for them to end (`_loop_ended` says
        what went wrong, before the stop or on the way out)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _say(self, status: str) -> None:
        """Record this node's status; a stop goes on if the database is away."""
        if self._membership is None:
            return
        try:
            await self._membership.become(status)
        except Exception as exc:
            log.warning("node.status_failed", status=status, error=str(exc)[:200])
