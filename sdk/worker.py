"""What the activity and decider workers share: poll loops on several task lists
under a bound on concurrent tasks, answers that carry the next poll (`Lane`), and
a graceful shutdown.

Shutdown stops polling, lets tasks in flight finish within the grace period,
then cancels what is left. SIGTERM and SIGINT start it when the worker runs
with `run()` in the main thread; a second signal skips the grace period.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import structlog

from sdk import event_loops
from sdk.client import POLL_TIMEOUT, AsyncClient
from sdk.errors import (
    AnswerUnconfirmedError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    WeftError,
)
from sdk.poll_connections import spread_connections
from sdk.sync_client import Client
from sdk.tls import TlsError
from sdk.worker_session import WorkerSession

log = structlog.get_logger("weft.worker")

DEFAULT_GRACE = timedelta(seconds=30)
# After a failed poll (server unreachable past the client's retry budget, or a
# refusal), wait this long before polling again.
POLL_BACKOFF = 1.0
MAX_DEFAULT_POLLERS = 32
POLL_CONNECTIONS = 4
# Against a port served by more processes than that, one for each, up to this.
MAX_POLL_CONNECTIONS = 16
# How long a stopping worker waits for an answer it sends again (see `_answer_folded`).
STOP_RESEND = timedelta(seconds=5)
# A task answered this soon after it started folds its worker's next poll into
# the answer; longer, and that poll is sent at once on its own (see `Lane`).
FOLD_WITHIN = 0.05
# A TLS refusal that is only a closed connection is asked again this long
# (seconds), this often, before the worker ends with it (`_through_unclear_tls`).
TLS_RECHECK_WITHIN = 10.0
TLS_RECHECK_EVERY = 1.0
R = TypeVar("R")
# What a server says of a call it refused before writing anything.
_REFUSED = (
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
    ResourceExhaustedError,
)
# What a worker's registration can be refused with that asking again will not
# change: it ends the worker at its start (`run_async`).
_REFUSED_FOR_GOOD = (InvalidArgumentError, PermissionDeniedError, UnauthenticatedError, TlsError)


class Lane:
    """One of a worker's polls of a task list, lent to the task it got.

    A task answered within `fold_within` of its start folds the lane's next
    poll into its answer (one call instead of two, for the worker and for the
    server) and the lane carries on with what that poll gets. A task that
    runs longer gives the lane back when that time is up, so that its loop
    polls again at once, and is answered alone.
    """

    def __init__(self, task_list: str, connection: AsyncClient) -> None:
        self.task_list = task_list
        self.connection = connection
        self.back = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    def lend(self, within: float) -> None:
        """A task of the lane starts: it may fold the next poll for `within` seconds."""
        if not self.back.is_set():
            self._timer = asyncio.get_running_loop().call_later(within, self.give_back)

    def take_fold(self) -> bool:
        """Whether the task answering now may fold the lane's next poll."""
        if self.back.is_set():
            return False
        if self._timer is not None:
            self._timer.cancel()
        return True

    def give_back(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.back.set()


class Worker:
    """Base of `ActivityWorker` and `DeciderWorker`; not used on its own."""

    kind = "task"
    poll_method = ""
    # How long a task may run and still fold the next poll into its answer.
    fold_within = FOLD_WITHIN

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        task_lists: Sequence[str],
        concurrency: int,
        identity: str | None,
        grace: timedelta,
        pollers: int | None,
    ) -> None:
        if not task_lists:
            raise ValueError("a worker needs at least one task list")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._sync = client if isinstance(client, Client) else None
        self.client: AsyncClient = client.aio if isinstance(client, Client) else client
        self.task_lists = list(dict.fromkeys(task_lists))
        self.concurrency = concurrency
        self.identity = identity or self.client.identity
        self.grace = grace
        if concurrency < len(self.task_lists):
            raise ValueError(
                f"concurrency {concurrency} is below the number of task lists"
                f" ({len(self.task_lists)}): some lists would never be polled"
            )
        # Each poll of a list is a lane that holds a slot: it waits for a task,
        # runs it in that slot and folds its next poll into the answer (`Lane`).
        # So all polls together fit in the slots, and an idle list is always
        # polled. A parked poll costs the server nothing, and the server hands a
        # new task straight to a poll waiting on the node that commits it, with
        # no claim; so by default every slot is a lane (up to 32 per list): a
        # lane is busy from its task's start until its answer is written, and
        # the more lanes wait, the fewer tasks land in the backlog.
        per_list = concurrency // len(self.task_lists)
        self.pollers = pollers or max(1, min(MAX_DEFAULT_POLLERS, per_list))
        if self.pollers * len(self.task_lists) > concurrency:
            need = self.pollers * len(self.task_lists)
            raise ValueError(f"{need} polls need a concurrency of {need}, not {concurrency}")
        self.abandoned = 0
        self.session = WorkerSession(
            self.client,
            kind=self.kind,
            task_lists=self.task_lists,
            identity=self.identity,
            build_id=os.environ.get("WEFT_BUILD_ID", ""),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._force: asyncio.Event | None = None
        # The lanes' tasks in an answer with a poll folded in, and whether a
        # stop has cut that call short (`_answer_folded`).
        self._folding: dict[asyncio.Task[Any], bool] = {}
        self._background: asyncio.Future[None] | None = None
        self._running: concurrent.futures.Future[None] | None = None
        self._started = threading.Event()
        self._stop_requests = 0

    @property
    def started(self) -> bool:
        """Whether the worker is ready to poll: its types registered (a decider's),
        or it stopped or failed before that."""
        return self._started.is_set()

    # -- running --------------------------------------------------------------------

    def run(self, *, event_loop: str | None = None) -> None:
        """Run until `shutdown()` or SIGTERM/SIGINT, then shut down gracefully.
        `event_loop`: "asyncio", "uvloop" or "auto" (uvloop where it is
        installed); by default `WEFT_EVENT_LOOP`, else "asyncio" (`sdk.event_loops`
        says what uvloop changes for a program's own subprocesses); a ValueError
        before anything runs for a loop unknown or not installed. A worker made
        with a sync client runs on that client's loop instead."""
        factory = None if self._sync is not None else event_loops.loop_factory(event_loop)
        restore = self._install_signal_handlers()
        try:
            if self._sync is not None:
                asyncio.run_coroutine_threadsafe(self.run_async(), self._sync.loop).result()
            else:
                with asyncio.Runner(loop_factory=factory) as runner:
                    runner.run(self.run_async())
        finally:
            for sig, previous in restore.items():
                signal.signal(sig, previous)

    async def run_async(self) -> None:
        """Run on the current event loop until `shutdown()`."""
        self._loop = asyncio.get_running_loop()
        self._stop, self._force = asyncio.Event(), asyncio.Event()
        for _ in range(self._stop_requests):
            self._request_stop()
        try:
            prepared = await self._through_unclear_tls(self._prepare)
        finally:
            # Entering `with worker:` returns once the worker is ready to poll (or
            # stopped, or failed to start).
            self._started.set()
        if not prepared:
            log.info("worker.stopped", kind=self.kind, identity=self.identity)
            return
        try:
            # A server still out of reach is retried for the client's policy: a
            # shutdown meanwhile ends the worker at once. (A register cut off
            # after the server took it leaves a session no poll uses; the server
            # ends it at its timeout.)
            if not await self._through_unclear_tls(self.session.open):
                log.info("worker.stopped", kind=self.kind, identity=self.identity)
                return
        except _REFUSED_FOR_GOOD as exc:
            # Not a server away: asking again gets the same answer (a key
            # refused, a grant missing, TLS set up one way here and another
            # there), so the worker ends with it, as a decider's registration
            # does, instead of polling into the same refusal without end. Said
            # here too: inside `with worker:` the error comes out only at the end.
            log.error("worker.refused", kind=self.kind, identity=self.identity, error=exc.message)
            raise
        except WeftError as exc:  # polls go on without one; the keeper tries again
            log.warning("worker.session_failed", identity=self.identity, error=exc.message)
        keeper = asyncio.create_task(self.session.keep())
        slots = asyncio.Semaphore(self.concurrency)
        in_flight: set[asyncio.Task[None]] = set()
        loops = [task_list for task_list in self.task_lists for _ in range(self.pollers)]
        connections: list[AsyncClient] = []
        pollers: list[asyncio.Task[None]] = []
        try:
            # Polls go over a few connections of their own, spread over the
            # processes of a server of several on one port (`weft server
            # --workers N`; `sdk.poll_connections`).
            wanted = min(len(loops), POLL_CONNECTIONS)
            up_to = min(len(loops), MAX_POLL_CONNECTIONS)
            spread = spread_connections(self.client, wanted, connections, up_to=up_to)
            if await self._until_stopped(spread):
                pollers = [
                    asyncio.create_task(
                        self._poll_loop(
                            task_list, connections[n % len(connections)], slots, in_flight
                        )
                    )
                    for n, task_list in enumerate(loops)
                ]
                log.info(
                    "worker.started",
                    kind=self.kind,
                    task_lists=self.task_lists,
                    identity=self.identity,
                    concurrency=self.concurrency,
                    event_loop=event_loops.running(),
                )
                await self._stop.wait()
        finally:
            for poller in pollers:
                poller.cancel()
            await asyncio.gather(*pollers, return_exceptions=True)
            await self._drain(in_flight)  # (before the connections close: answers use them)
            await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            await self.session.close()
            log.info("worker.stopped", kind=self.kind, identity=self.identity)

    async def _prepare(self) -> None:
        """Work before polling starts (a subclass hook); a shutdown interrupts it."""

    async def _through_unclear_tls(self, step: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Run a start-up step (a decider's registrations, the session's
        opening); False if a shutdown came first. A TLS refusal seen only as a
        closed connection (`TlsError.certain`) is asked again for
        `TLS_RECHECK_WITHIN` from the first one: a server restarting closes
        connections too, and that is no reason for a worker to end."""
        deadline: float | None = None
        while True:
            try:
                return await self._until_stopped(step())
            except TlsError as exc:
                deadline = deadline or time.monotonic() + TLS_RECHECK_WITHIN
                if exc.certain or time.monotonic() >= deadline:
                    raise
                log.info(
                    "worker.tls_unclear", kind=self.kind, identity=self.identity, error=exc.message
                )
            if not await self._until_stopped(asyncio.sleep(TLS_RECHECK_EVERY)):
                return False

    async def _until_stopped(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run `work` unless a shutdown comes first; True when it finished."""
        assert self._stop is not None
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return False
        task.result()
        return True

    def shutdown(self) -> None:
        """Stop polling and finish (thread-safe). Calling it twice skips the grace."""
        self._stop_requests += 1
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._request_stop)

    def _request_stop(self) -> None:
        assert self._stop is not None and self._force is not None
        if self._stop.is_set():
            self._force.set()
        self._stop.set()
        if self._folding:
            # A loop turn later: a folded poll's response already in (its lane
            # about to resume with it) is kept, not cancelled away.
            asyncio.get_running_loop().call_soon(self._cut_folded)

    def _cut_folded(self) -> None:
        """Cut short, once each, the answers with a folded poll still in flight
        at a stop; `_answer_folded` takes the cancellation back. (A response
        that lands between the stop and this is lost: its task is handed out
        again at its timeout.)"""
        for lane_task, cut in self._folding.items():
            if not cut:
                self._folding[lane_task] = True
                lane_task.cancel()

    async def _drain(self, in_flight: set[asyncio.Task[None]]) -> None:
        if not in_flight:
            return
        assert self._force is not None
        log.info("worker.draining", kind=self.kind, in_flight=len(in_flight), grace=str(self.grace))
        forced = asyncio.create_task(self._force.wait())
        pending = await self._wait_in_flight(in_flight, forced)
        forced.cancel()
        left = list(pending)
        if left:
            self.abandoned = len(left)
            log.warning("worker.abandoning", kind=self.kind, tasks=len(left))
            for task in left:
                task.cancel()
            await asyncio.wait(left, timeout=5)

    async def _wait_in_flight(
        self, in_flight: set[asyncio.Task[None]], forced: asyncio.Task[Any]
    ) -> set[asyncio.Future[Any]]:
        """Wait for the tasks in flight, up to the grace period or a second stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace.total_seconds()
        pending: set[asyncio.Future[Any]] = set(in_flight)
        while pending and not forced.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            _, pending = await asyncio.wait(
                {*pending, forced}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(forced)
        return pending

    # -- the poll loop ----------------------------------------------------------------

    async def _poll_loop(
        self,
        task_list: str,
        connection: AsyncClient,
        slots: asyncio.Semaphore,
        in_flight: set[asyncio.Task[None]],
    ) -> None:
        while True:
            await slots.acquire()
            try:
                task = await self._poll(task_list, connection)
            except UnavailableError as exc:
                slots.release()
                log.warning("poll.unavailable", task_list=task_list, error=exc.message)
                await asyncio.sleep(POLL_BACKOFF)
                continue
            except FailedPreconditionError as exc:
                # The session ended (the worker was cut off too long): poll
                # without one until the keeper has registered a new one.
                slots.release()
                log.warning("poll.refused", task_list=task_list, error=exc.message)
                self.session.expired()
                await asyncio.sleep(POLL_BACKOFF)
                continue
            except WeftError as exc:
                slots.release()
                log.error("poll.failed", task_list=task_list, error=exc.message)
                await asyncio.sleep(POLL_BACKOFF)
                continue
            except BaseException:
                slots.release()
                raise
            if task is None:
                slots.release()
                continue
            lane = Lane(task_list, connection)
            running = asyncio.create_task(self._run_lane(task, lane))
            running.add_done_callback(self._log_crash)
            in_flight.add(running)
            running.add_done_callback(in_flight.discard)
            running.add_done_callback(lambda _: slots.release())
            # This loop polls again once the lane is back: at once for a task
            # that runs long, after the folded polls for quick ones.
            await lane.back.wait()

    async def _run_lane(self, task: Any, lane: Lane) -> None:
        """Run a task, then each task a poll folded into the previous answer got,
        in the slot the first one took."""
        try:
            while task is not None:
                lane.lend(self.fold_within)
                task = await self._handle(task, lane)
        finally:
            lane.give_back()

    async def _send_answer(self, lane: Lane, method: str, req: Any, nothing: Callable[[], R]) -> R:
        """Send a task's answer, with the lane's next poll folded in (`next_poll`)
        unless the task ran past `fold_within` or the worker is stopping; the
        response's `next_task` is what that poll got."""
        assert self._stop is not None
        if self._stop.is_set() or not lane.take_fold():
            alone: R = await self.client.rpc(method, req)
            return alone
        req.next_poll.CopyFrom(self._poll_request(lane.task_list))
        return await self._answer_folded(lane, method, req, nothing)

    async def _poll(self, task_list: str, connection: AsyncClient) -> Any:
        resp = await connection.rpc(
            self.poll_method, self._poll_request(task_list), timeout=POLL_TIMEOUT
        )
        return self._task_of(task_list, resp)

    async def _answer_folded(
        self, lane: Lane, method: str, req: Any, nothing: Callable[[], R]
    ) -> R:
        """Send an answer that carries a poll, on the lane's connection, once:
        the call waits as long as the poll does.

        NOT_FOUND or FAILED_PRECONDITION from it are about the task (it timed
        out, its run closed): the server answers them before writing anything,
        and never after. A refusal (`_REFUSED`) wrote nothing either, and may be
        the poll's: the answer is sent again alone, and that call says how it
        went. Anything else (the connection lost, the worker stopping, which
        cuts the call short) may have come after the answer was written: it is
        sent again alone, and NOT_FOUND or FAILED_PRECONDITION then mean it was
        (or is moot), which the empty response says. A stopping worker that
        cannot send it again raises `AnswerUnconfirmedError`.
        """
        assert self._stop is not None
        # The call runs in the lane's own task: a stop cancels that task while
        # the call is in flight (`_cut_folded`), and the cancellation is taken
        # back here. (A task of its own per call, raced against the stop,
        # cost three tasks per answer.)
        lane_task = asyncio.current_task()
        assert lane_task is not None
        self._folding[lane_task] = False
        failure: BaseException | None = None
        try:
            folded: R = await lane.connection.rpc(method, req, timeout=POLL_TIMEOUT, retried=False)
        except asyncio.CancelledError:
            if not self._folding.pop(lane_task) or lane_task.uncancel() > 0:
                raise  # the lane itself was cancelled
        except Exception as exc:
            failure = exc
        else:
            # The call took the stop's cancellation and finished: take it back,
            # but not a cancellation of the lane that came with it.
            if self._folding.pop(lane_task) and lane_task.uncancel() > 0:
                raise asyncio.CancelledError
            return folded
        finally:
            self._folding.pop(lane_task, None)
        if isinstance(failure, (NotFoundError, FailedPreconditionError)):
            raise failure
        req.ClearField("next_poll")
        if isinstance(failure, _REFUSED):
            alone: R = await self.client.rpc(method, req)
            return alone
        # At a stop, once and briefly: a server out of reach must not hold the
        # worker for its grace (an answer that was not written leaves its task
        # to time out, and the server to retry it).
        stopped = self._stop.is_set()
        try:
            again: R = await self.client.rpc(
                method, req, retried=not stopped, timeout=STOP_RESEND if stopped else None
            )
        except (NotFoundError, FailedPreconditionError):
            return nothing()
        except InvalidArgumentError:
            raise  # (the answer itself is refused, whichever call wrote it: never taken)
        except WeftError as exc:
            # At a stop, anything else (the gate's refusals too: they come before
            # the task is looked at) leaves the cut-off call's answer unknown.
            if not stopped:
                raise
            raise AnswerUnconfirmedError(exc.message) from exc
        return again

    def _log_crash(self, task: asyncio.Task[None]) -> None:
        """A handler that raised left its task unanswered (it will time out): say so."""
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("task.crashed", kind=self.kind, error=f"{type(exc).__name__}: {exc}")

    def _poll_request(self, task_list: str) -> Any:
        """This worker's poll of `task_list` (a request of `poll_method`)."""
        raise NotImplementedError

    def _task_of(self, task_list: str, resp: Any) -> Any:
        """The task a poll of `task_list` got, as `_handle` takes it; None for none."""
        raise NotImplementedError

    async def _handle(self, task: Any, lane: Lane) -> Any:
        """Run `task` and answer it; the next task if the answer folded in a
        poll that got one, else None."""
        raise NotImplementedError

    # -- background use (tests, embedding) -----------------------------------------------

    def __enter__(self) -> Worker:
        """Run in the background of a sync `Client`'s loop until the block ends."""
        if self._sync is None:
            raise TypeError("use `async with` for a worker on an AsyncClient")
        running = asyncio.run_coroutine_threadsafe(self.run_async(), self._sync.loop)
        self._running = running
        while not self._started.wait(0.05):
            if running.done():
                running.result()  # it failed to start: raise why
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        if self._running is not None:
            self._running.result()

    async def __aenter__(self) -> Worker:
        """Run as a task of the current loop until the block ends."""
        self._background = asyncio.ensure_future(self.run_async())
        while not self._started.is_set():
            if self._background.done():
                self._background.result()
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.shutdown()
        if self._background is not None:
            await self._background

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_requests >= 2:
            # Third time: the worker is stuck past its grace (a sync task that
            # never returns keeps the interpreter from exiting). Leave now.
            os._exit(128 + signum)
        self.shutdown()
