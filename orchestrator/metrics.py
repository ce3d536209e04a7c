"""Prometheus metrics of one node, served as text exposition on --metrics-listen.

One registry per server (no module globals), so in-process test servers do not
share counters. Workflow ids are never labels: they would explode cardinality.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from orchestrator.store.rows import DbStats
from orchestrator.tls import TlsFiles


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._rpc_children: dict[tuple[str, str], Any] = {}
        self._tls_context: ssl.SSLContext | None = None
        self.rpc_seconds = Histogram(
            "weft_rpc_duration_seconds",
            "gRPC handling time (long polls and answers with a folded poll include their wait)",
            ["method", "code"],
            registry=self.registry,
        )
        self.events = Counter(
            "weft_events_appended_total", "History events appended", registry=self.registry
        )
        self.tasks_claimed = Counter(
            "weft_tasks_claimed_total", "Tasks handed to pollers", ["kind"], registry=self.registry
        )
        self.deadlines_fired = Counter(
            "weft_deadlines_fired_total",
            "Timeouts and timers that appended an event",
            ["kind"],
            registry=self.registry,
        )
        self.deadlines_failed = Counter(
            "weft_deadline_fire_failures_total",
            "Due timeouts and timers that did not fire (firing raised, or the run's"
            " state did not have them due, twice in a row): each is tried again"
            " after a back-off",
            ["kind"],
            registry=self.registry,
        )
        self.worker_sessions_lost = Counter(
            "weft_worker_sessions_lost_total",
            "Worker sessions found expired (by this node, as the upkeep leader)",
            registry=self.registry,
        )
        self.worker_lost_runs = Counter(
            "weft_worker_lost_runs_total",
            "Runs whose started tasks timed out because their worker was lost",
            registry=self.registry,
        )
        self.leader = Gauge(
            "weft_upkeep_leader", "1 while this node leads the upkeep", registry=self.registry
        )
        # Set by the server's periodic diagnosis (every --diagnose-interval) over
        # every namespace with open runs, on the upkeep leader; the other nodes
        # report 0, so aggregate with max(), not sum().
        self.stuck = Gauge(
            "weft_stuck_findings",
            "Findings of the last diagnosis of stuck runs (`weft doctor`), by kind",
            ["kind"],
            registry=self.registry,
        )
        self.schedule_slots = Counter(
            "weft_schedule_slots_total",
            "Schedule slots this node handled: started, skipped (overlap) or missed (too late)",
            ["outcome"],
            registry=self.registry,
        )

    def rpc(self, method: str, code: str) -> Any:
        """The histogram child of one method and code (labels() costs a lookup
        and a lock on every call; this is on every RPC)."""
        child = self._rpc_children.get((method, code))
        if child is None:
            child = self._rpc_children[(method, code)] = self.rpc_seconds.labels(method, code)
        return child

    def count_database(self, stats: DbStats) -> None:
        """Expose the store's statement and transaction counts (read when scraped)."""
        self.registry.register(_DbCollector(stats))

    def serve(self, listen: str, tls: TlsFiles | None = None) -> None:
        """Serve the text exposition on HOST:PORT; with `tls`, over HTTPS with the
        gRPC listener's certificate, and with its client CA a client certificate
        is required (a scraper needs one, as any other client)."""
        host, _, port = listen.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        if tls is None:
            start_http_server(int(port), addr=host, registry=self.registry)
            return
        server, _ = start_http_server(
            int(port),
            addr=host,
            registry=self.registry,
            certfile=tls.cert,
            keyfile=tls.key,
            client_cafile=tls.client_ca or None,
            client_auth_required=bool(tls.client_ca),
        )
        if isinstance(server.socket, ssl.SSLSocket):
            self._tls_context = server.socket.context

    def reload_tls(self, tls: TlsFiles) -> None:
        """New certificate files: new HTTPS connections get them (open ones keep
        theirs). A client CA is added to the trusted ones; OpenSSL cannot drop
        one from a live context, so removing a CA needs a restart."""
        context = self._tls_context
        if context is None:
            return
        context.load_cert_chain(tls.cert, tls.key)
        if tls.client_ca:
            context.load_verify_locations(cafile=tls.client_ca)


class _DbCollector(Collector):
    def __init__(self, stats: DbStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "weft_db_statements", "SQL statements sent", value=self._stats.statements
        )
        yield CounterMetricFamily(
            "weft_db_transactions",
            "Database transactions committed",
            value=self._stats.transactions,
        )
        yield CounterMetricFamily(
            "weft_db_lost_writes",
            "Writes another writer came first to (applied again to the new state)",
            value=self._stats.lost_writes,
        )
