"""Prometheus metrics of one node, served as text exposition on --metrics-listen.

One registry per server (no module globals), so in-process test servers do not
share counters. Workflow ids are never labels: they would explode cardinality.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from orchestrator.store.rows import DbStats


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rpc_seconds = Histogram(
            "weft_rpc_duration_seconds",
            "gRPC handling time (long polls include their wait)",
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

    def count_database(self, stats: DbStats) -> None:
        """Expose the store's statement and transaction counts (read when scraped)."""
        self.registry.register(_DbCollector(stats))

    def serve(self, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)


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
