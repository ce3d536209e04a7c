"""One chaos run in one mode: start the cluster, drive the workflows while
processes are killed at random, let it settle, check every history.

Modes: `sqlite` (one server on a SQLite file), `postgres` (one server), and
`two-nodes` (two servers on one PostgreSQL database). Each mode runs two
deciders and two runners; with two nodes, half of them (and half of the
workflows) talk to each node.

The run's time budget is split: workflows start during its first half; kills
go on until every run has closed or three quarters have passed; then every
process is up and left alone until the runs close or the budget ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal

from chaos import procs
from chaos.check import Verdict, check_history
from chaos.pgcluster import OwnCluster, create_database, drop_database, with_database
from chaos.procs import Member
from chaos.workflow import SIGNAL, TASK_LIST, WORKFLOW_TYPE, signal_value
from sdk import AsyncClient, FailedPreconditionError, NotFoundError, WeftError
from sdk.retry import RetryPolicy

Mode = Literal["sqlite", "postgres", "two-nodes"]
MODES: tuple[Mode, ...] = ("sqlite", "postgres", "two-nodes")
DECIDERS = 2
RUNNERS = 2
# Short: a decision task held by a killed decider is handed out again soon.
DECIDER_TIMEOUT = timedelta(seconds=3)
# The driver's calls ride out a server restart (or PostgreSQL's) by themselves.
DRIVER_RETRY = RetryPolicy(maximum=timedelta(seconds=2), give_up_after=timedelta(seconds=60))


@dataclass(frozen=True)
class Options:
    mode: Mode
    workflows: int
    seconds: float
    log_dir: Path
    # PostgreSQL modes: a cluster of the run's own (crashed and restarted too),
    # else a database of its own on this shared server (never restarted).
    own_cluster: bool = False
    postgres_url: str = ""
    seed: int = 0
    kill_interval: tuple[float, float] = (0.5, 3.0)  # seconds between two kills
    down_for: tuple[float, float] = (0.2, 2.0)  # how long a killed process stays down
    # The next kill only once every process killed is back, and then after
    # `kill_interval`: one process down at a time. The short run in `make test`
    # does so. Where a restart takes seconds (a slow machine), kills on a clock
    # of their own kept its only server down most of its 75 s, and its driver
    # missed its deadline though nothing was lost. `make chaos`, long enough to
    # ride that out, keeps kills that overlap (both nodes down, a worker
    # restarting while its server is down).
    one_down_at_a_time: bool = False


@dataclass
class Figures:
    mode: Mode
    workflows: int = 0
    seconds: float = 0.0
    kills: Counter[str] = field(default_factory=Counter)
    pg_restarts: int = 0
    pg_note: str = ""
    unexpected_exits: list[str] = field(default_factory=list)
    signals_sent: int = 0
    driver_errors: list[str] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.unexpected_exits and not self.driver_errors


class Cluster:
    """The processes of one mode, and the kill loop and watchdog over them."""

    def __init__(self, opts: Options, db_url: str, pg: OwnCluster | None) -> None:
        self.opts = opts
        self.pg = pg
        self.rng = random.Random(opts.seed)
        nodes = 2 if opts.mode == "two-nodes" else 1
        self.servers = [procs.server(f"server-{i}", db_url, opts.log_dir) for i in range(nodes)]
        kinds: tuple[tuple[Literal["decider", "runner"], int], ...] = (
            ("decider", DECIDERS),
            ("runner", RUNNERS),
        )
        self.workers = [
            procs.worker(kind, f"{kind}-{i}", self.servers[i % nodes].address, opts.log_dir)
            for kind, count in kinds
            for i in range(count)
        ]
        self.clients = [
            AsyncClient(node.address, identity="chaos-driver", retry=DRIVER_RETRY)
            for node in self.servers
        ]
        # A server starting while PostgreSQL is down cannot migrate and exits:
        # PostgreSQL's restarts and the servers' never overlap.
        self.pg_lock = asyncio.Lock()
        self.kills: Counter[str] = Counter()
        self.pg_restarts = 0
        self.unexpected: list[str] = []
        self._restarts: set[asyncio.Task[None]] = set()

    @property
    def members(self) -> list[Member]:
        return [*self.servers, *self.workers]

    async def start(self) -> None:
        for node in self.servers:  # one after the other: the first one migrates
            await node.start()
        for member in self.workers:
            await member.start()

    async def stop(self) -> None:
        for task in self._restarts:
            task.cancel()
        for client in self.clients:
            await client.close()
        await asyncio.gather(*(m.stop() for m in self.workers))
        await asyncio.gather(*(m.stop() for m in self.servers))

    # -- chaos ---------------------------------------------------------------------

    async def kill_loop(self, until: asyncio.Event) -> None:
        """kill -9 a random process of a random kind every few seconds (with
        `one_down_at_a_time`, a few seconds after the last one killed is back),
        and bring it back a moment later; PostgreSQL too when the cluster is the
        run's own."""
        kinds = ["server", "decider", "runner"] + (["postgres"] if self.pg else [])
        rounds: list[str] = []
        while not until.is_set():
            restarting = {task for task in self._restarts if not task.done()}
            if self.opts.one_down_at_a_time and restarting:
                ended = asyncio.ensure_future(until.wait())
                await asyncio.wait({*restarting, ended}, return_when=asyncio.FIRST_COMPLETED)
                ended.cancel()
                continue  # (another restart still under way, or the end)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), self.rng.uniform(*self.opts.kill_interval))
            if until.is_set():
                return
            if not rounds:  # every kind once per round, in a random order
                rounds = self.rng.sample(kinds, len(kinds))
            kind = rounds.pop()
            if kind == "postgres":
                await self._crash_postgres()
                continue
            up = [m for m in self.members if m.kind == kind and not m.down]
            if not up:
                continue
            victim = self.rng.choice(up)
            victim.kill9()
            self.kills[kind] += 1
            task = asyncio.create_task(self._restart(victim, self.rng.uniform(*self.opts.down_for)))
            self._restarts.add(task)
            task.add_done_callback(self._restarts.discard)

    async def _restart(self, member: Member, after: float) -> None:
        await asyncio.sleep(after)
        if member.kind == "server":
            async with self.pg_lock:
                await self._bring_up(member)
        else:
            await self._bring_up(member)

    async def _bring_up(self, member: Member) -> None:
        """Start it; a start that fails is an unexpected exit, and is tried again."""
        for _ in range(5):
            try:
                await member.start()
                return
            except RuntimeError as exc:
                self.unexpected.append(f"{member.name} failed to start: {exc}")
                member.kill9()
        raise RuntimeError(f"{member.name} would not start")

    async def _crash_postgres(self) -> None:
        assert self.pg is not None
        async with self.pg_lock:
            await asyncio.to_thread(self.pg.crash)
            await asyncio.sleep(self.rng.uniform(*self.opts.down_for))
            await asyncio.to_thread(self.pg.start)
            self.pg_restarts += 1

    async def watchdog(self, until: asyncio.Event) -> None:
        """A process that died without being killed is a finding: note it (with
        its log's tail) and start it again so the run can go on."""
        while not until.is_set():
            for member in self.members:
                if member.exited_by_itself():
                    code = member.proc.proc.returncode if member.proc.proc else None
                    self.unexpected.append(
                        f"{member.name} exited by itself (code {code})\n{member.proc.log_tail()}"
                    )
                    member.down = True
                    if member.kind == "server":
                        async with self.pg_lock:
                            await self._bring_up(member)
                    else:
                        await self._bring_up(member)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), 0.5)

    async def all_up(self) -> None:
        """Wait for the restarts under way; then every process runs."""
        while self._restarts:
            await asyncio.gather(*self._restarts, return_exceptions=True)
        for member in self.members:
            if not member.proc.running:
                await self._bring_up(member)


class Driver:
    """Starts the workflows, sends each its signal, then sends it again (same
    request id: the server must record it once), at random moments."""

    def __init__(self, cluster: Cluster, opts: Options) -> None:
        self.cluster = cluster
        self.opts = opts
        self.rng = random.Random(opts.seed + 1)
        self.signals_sent = 0
        self.errors: list[str] = []

    def client(self, n: int) -> AsyncClient:
        return self.cluster.clients[n % len(self.cluster.clients)]

    async def drive(self, n: int, at: float, deadline: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        wid = workflow_id(n)
        pause = round(self.rng.uniform(0.5, 3.0), 2)
        started = await self._call(
            n,
            deadline,
            lambda c: c.start_workflow(
                WORKFLOW_TYPE,
                {"n": n, "pause": pause},
                workflow_id=wid,
                task_list=TASK_LIST,
                decider_timeout=DECIDER_TIMEOUT,
                request_id=f"start-{wid}",
            ),
        )
        if not started:
            return
        sends = 1 + self.rng.randint(1, 2)  # the signal, then one or two duplicates
        for i in range(sends):
            await asyncio.sleep(self.rng.uniform(0.0, 2.0) if i == 0 else self.rng.uniform(0.2, 4))
            if not await self._signal(n, deadline, first=i == 0):
                return

    async def _signal(self, n: int, deadline: float, *, first: bool) -> bool:
        wid = workflow_id(n)
        try:
            sent = await self._call(
                n,
                deadline,
                lambda c: c.signal(
                    wid, SIGNAL, {"v": signal_value(n)}, request_id=f"{SIGNAL}-{wid}"
                ),
            )
        except (FailedPreconditionError, NotFoundError) as exc:
            if first:  # it waits for this signal: it cannot have closed before
                self.errors.append(f"{wid}: first signal refused: {exc}")
            return False  # a duplicate sent after the run closed: refused, rightly
        self.signals_sent += sent
        return sent

    async def _call(
        self, n: int, deadline: float, call: Callable[[AsyncClient], Awaitable[object]]
    ) -> bool:
        """Make the call, again after a failure (same request id: done once) until
        the deadline; False if it never went through."""
        last = ""
        while time.monotonic() < deadline:
            try:
                await call(self.client(n))
                return True
            except (FailedPreconditionError, NotFoundError):
                raise
            except WeftError as exc:
                last = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.5)
        self.errors.append(f"{workflow_id(n)}: call never went through: {last}")
        return False

    async def open_runs(self) -> int | None:
        """How many runs are open, or None when no node answers just now."""
        for client in self.cluster.clients:
            try:
                runs = await client.list(
                    status="open", workflow_type=WORKFLOW_TYPE, limit=self.opts.workflows + 1
                )
            except WeftError:
                continue
            return len(runs)
        return None


def workflow_id(n: int) -> str:
    return f"chaos-{n}"


# -- one mode, from a fresh database to the verdict ------------------------------------


async def run_mode(opts: Options) -> Figures:
    figures = Figures(opts.mode, workflows=opts.workflows)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    async with _database(opts, figures) as (db_url, pg):
        cluster = Cluster(opts, db_url, pg)
        try:
            await cluster.start()
            driver = Driver(cluster, opts)
            await _exercise(cluster, driver, opts, opts.seconds - (time.monotonic() - began))
            figures.verdict = await _check_all(cluster, opts)
        finally:
            await cluster.stop()
        figures.kills = cluster.kills
        figures.pg_restarts = cluster.pg_restarts
        figures.unexpected_exits = cluster.unexpected
        figures.signals_sent = driver.signals_sent
        figures.driver_errors = driver.errors
    figures.seconds = time.monotonic() - began
    return figures


@contextlib.asynccontextmanager
async def _database(
    opts: Options, figures: Figures
) -> AsyncIterator[tuple[str, OwnCluster | None]]:
    """The mode's fresh database (and the PostgreSQL cluster, when it is the run's own)."""
    if opts.mode == "sqlite":
        figures.pg_note = "SQLite"
        yield f"sqlite:///{opts.log_dir / 'weft.db'}", None
    elif opts.own_cluster:
        pg = OwnCluster()
        figures.pg_note = f"own cluster {pg.version}/{pg.name} on port {pg.port}"
        try:
            await asyncio.to_thread(pg.create)
            yield pg.url, pg
        finally:
            await asyncio.to_thread(pg.drop)
    else:
        name = f"weft_chaos_{uuid.uuid4().hex[:8]}"
        figures.pg_note = "shared server: never restarted"
        await asyncio.to_thread(create_database, opts.postgres_url, name)
        try:
            yield with_database(opts.postgres_url, name), None
        finally:
            await asyncio.to_thread(drop_database, opts.postgres_url, name)


async def _exercise(cluster: Cluster, driver: Driver, opts: Options, seconds: float) -> None:
    t0 = time.monotonic()
    start_window = seconds / 2
    chaos_end = t0 + 3 * seconds / 4
    # Room at the end to read every history.
    end = t0 + seconds - min(20.0, seconds / 10)
    drives = asyncio.gather(
        *(
            driver.drive(n, t0 + start_window * n / opts.workflows, end)
            for n in range(opts.workflows)
        )
    )
    stop_chaos, stop_watch = asyncio.Event(), asyncio.Event()
    killer = asyncio.create_task(cluster.kill_loop(stop_chaos))
    watchdog = asyncio.create_task(cluster.watchdog(stop_watch))
    try:
        await _until_all_closed(driver, drives, chaos_end)
        stop_chaos.set()
        await killer
        await cluster.all_up()
        await _until_all_closed(driver, drives, end)
    finally:
        stop_chaos.set()
        stop_watch.set()
        await asyncio.gather(killer, watchdog, return_exceptions=True)
        if not drives.done():
            driver.errors.append("the driver was still sending at the deadline")
            drives.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drives


async def _until_all_closed(
    driver: Driver, drives: asyncio.Future[list[None]], deadline: float
) -> None:
    while time.monotonic() < deadline:
        if drives.done() and await driver.open_runs() == 0:
            return
        await asyncio.sleep(1.0)


async def _check_all(cluster: Cluster, opts: Options) -> Verdict:
    total = Verdict()
    client = cluster.clients[0]
    reading = asyncio.Semaphore(8)

    async def one(n: int) -> Verdict:
        wid = workflow_id(n)
        async with reading:
            try:
                events = await client.history(wid)
            except NotFoundError:
                lost = Verdict(workflows=1, lost=1)
                lost.problems.append(f"{wid}: no such workflow (never started)")
                return lost
        return check_history(n, wid, events)

    for verdict in await asyncio.gather(*(one(n) for n in range(opts.workflows))):
        total.add(verdict)
    return total
