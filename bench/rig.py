"""Everything a scenario needs, started once per run: the Weft server on
PostgreSQL with its decider and runner processes, the echo server, the floor
server, the DBOS peer, the completion listener and the paths of the
bare-append database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.drive import Completions
from bench.peer import DbosPeer
from bench.pg_cpu import PgCpuProbe
from bench.processes import Process, WeftServer, weft_worker
from bench.profile import Profile
from bench.workload import TASK_LIST
from orchestrator.store import dialect
from sdk import AsyncClient
from sdk.retry import RetryPolicy
from sdk.tls import TlsConfig

# Worker processes sized so they never limit 16 workflows in flight.
DECIDER_CONCURRENCY = "32"
RUNNER_CONCURRENCY = "64"


@dataclass(frozen=True)
class Secured:
    """TLS files and API keys of a node started with TLS and `--auth`."""

    cert: str
    key: str
    ca: str
    worker_key: str
    driver_key: str


@dataclass
class WeftNode:
    """One `weft server` with a `weft decider` and a `weft runner` on `bench.workload`,
    or (`embed`) with both inside it: `weft server --embed bench.workload`."""

    server: WeftServer
    decider: Process | None
    runner: Process | None
    client: AsyncClient
    db_url: str
    # PostgreSQL's CPU, sampled through a connection taken before the node's pools
    # grow (None on SQLite, or with the cluster on another machine).
    pg_probe: PgCpuProbe | None = None

    @classmethod
    async def start(
        cls,
        name: str,
        db_url: str,
        log_dir: Path,
        log_level: str,
        server_workers: int = 1,
        secured: Secured | None = None,
        embed: bool = False,
        launchers: dict[str, list[str]] | None = None,
        event_loop: str | None = None,
    ) -> WeftNode:
        """`launchers`: by role ("server", "decider", "runner"), a launcher to
        start that process through (`Process.run_under`). `event_loop`: each
        process's `--event-loop` (None: the commands' defaults)."""
        launch = launchers or {}
        extra: tuple[str, ...] = ("--workers", str(server_workers)) if server_workers > 1 else ()
        loop_args = ("--event-loop", event_loop) if event_loop else ()
        extra += loop_args
        if embed:
            extra += ("--embed", "bench.workload", "--embed-concurrency", RUNNER_CONCURRENCY)
        worker_args: list[str] = []
        if secured is not None:
            extra += ("--tls-cert", secured.cert, "--tls-key", secured.key, "--auth")
            worker_args = ["--tls-ca", secured.ca, "--api-key", secured.worker_key]
        server = WeftServer(
            f"{name}-server", db_url, log_dir, log_level, extra, secured.ca if secured else ""
        )
        if "server" in launch:
            server.run_under(launch["server"])
        probe = PgCpuProbe.open(db_url) if dialect.sqlite_path(db_url) is None else None
        try:
            server.start()
            await server.wait_serving()
        except BaseException:
            if probe is not None:
                probe.close()
            raise
        client = AsyncClient(
            server.address,
            identity="bench-driver",
            retry=RetryPolicy(),
            tls=TlsConfig(ca=secured.ca) if secured else None,
            api_key=secured.driver_key if secured else None,
        )
        if embed:
            return cls(server, None, None, client, db_url, probe)
        common = [*worker_args, *loop_args, "--task-list", TASK_LIST, "bench.workload"]
        workers = {}
        for role, concurrency in (("decider", DECIDER_CONCURRENCY), ("runner", RUNNER_CONCURRENCY)):
            worker = weft_worker(
                role,
                f"{name}-{role}",
                server.address,
                ["--concurrency", concurrency, *common],
                log_dir,
                log_level,
            )
            if role in launch:
                worker.run_under(launch[role])
            workers[role] = worker.start()
        return cls(server, workers["decider"], workers["runner"], client, db_url, probe)

    @property
    def workers(self) -> tuple[Process, ...]:
        """The worker processes: none when they run inside the server (`embed`)."""
        return tuple(p for p in (self.decider, self.runner) if p is not None)

    def check_alive(self) -> None:
        for proc in (self.server, *self.workers):
            proc.check_alive()

    async def stop(self) -> None:
        try:
            await self.client.close()
            for proc in (*reversed(self.workers), self.server):
                proc.stop()
        finally:
            if self.pg_probe is not None:
                self.pg_probe.close()


@dataclass
class Rig:
    profile: Profile
    log_dir: Path
    log_level: str
    pg: WeftNode
    echo: Process
    echo_address: str
    floor: Process
    floor_address: str
    peer: DbosPeer
    append_url: str
    admin_url: str
    completions: Completions
