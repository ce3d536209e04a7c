"""Invariant 6: an RPC that returned OK is durable. A `weft server` subprocess is
killed with SIGKILL while workflows have activities started and not, user
timers pending, a decision task started and signals queued; restarted on the
same database, it must lose nothing, duplicate nothing, fire the timers that
fell due while it was down, and let every workflow run to completion."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, dur, payload, schedule, unique, wait_until
from tests.serverproc import ServerProcess

N_WORKFLOWS = 6
ACTIVITIES = ("a0", "a1", "a2")
TIMERS = {"t1": 6.0, "t2": 9.0}  # t1 falls due while the server is down (room for a slow set-up)
SIGNALS = ("s0", "s1")
STC = 1.0  # activity start-to-close: attempts started before the crash time out quickly
ACTIVITY_CLOSES = (
    "ActivitySuccess",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityScheduledTimeout",
    "ActivityCanceled",
)


@pytest.fixture
async def node(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    proc = ServerProcess(db_url, tmp_path, name="kill9", long_poll="2s")
    await proc.start()
    yield proc
    proc.stop()


def timer(timer_id: str, seconds: float) -> d.Decision:
    return d.Decision(
        start_timer=d.StartTimerDecision(timer_id=timer_id, start_to_fire_timeout=dur(seconds))
    )


def marker(name: str) -> d.Decision:
    return d.Decision(
        record_marker=d.RecordMarkerDecision(marker_name=name, details=payload({"m": name}))
    )


class Flow(Driver):
    """One workflow: its own decision and activity task lists."""

    def __init__(self, stub: sg.WorkflowServiceStub, index: int) -> None:
        super().__init__(stub)
        self.index = index
        self.activity_list = unique("acts")
        self.signal_ids = {name: unique(f"req-{name}") for name in SIGNALS}

    async def signal(self, name: str) -> None:
        await self.stub.SignalWorkflow(
            s.SignalWorkflowRequest(
                namespace=self.namespace,
                execution=c.WorkflowExecution(workflow_id=self.workflow_id),
                signal_name=name,
                input=payload({"wf": self.index, "signal": name}),
                identity="sender",
                request_id=self.signal_ids[name],
            )
        )

    def plan(self, events: list[h.HistoryEvent]) -> list[d.Decision]:
        """The decider: a pure function of the history."""
        activity_of: dict[int, str] = {}
        closed: set[int] = set()
        succeeded: set[str] = set()
        expired: set[str] = set()
        signals: set[str] = set()
        for e in events:
            if e.type == "ActivityScheduled":
                activity_of[e.event_id] = e.activity_scheduled.activity_id
            elif e.type in ACTIVITY_CLOSES:
                scheduled_id = getattr(e, e.WhichOneof("attributes")).scheduled_event_id
                closed.add(scheduled_id)
                if e.type == "ActivitySuccess":
                    succeeded.add(activity_of[scheduled_id])
            elif e.type == "TimerExpired":
                expired.add(e.timer_expired.timer_id)
            elif e.type == "Signal":
                signals.add(e.signal.signal_name)
        pending = {aid for sid, aid in activity_of.items() if sid not in closed}
        if succeeded >= set(ACTIVITIES) and expired >= set(TIMERS) and signals >= set(SIGNALS):
            return [complete({"wf": self.index})]
        return [
            schedule(aid, f"task-{aid}", self.activity_list, start_to_close=STC)
            for aid in ACTIVITIES
            if aid not in succeeded and aid not in pending
        ]

    async def decide_until_closed(self) -> None:
        while True:
            task = await self.poll_decision()
            if not task.task_token:
                continue
            events = list(task.events)
            token = task.next_page_token
            while token:  # the window may span pages
                more = await self.stub.GetWorkflowHistory(
                    s.GetWorkflowHistoryRequest(
                        namespace=self.namespace,
                        execution=task.workflow_execution,
                        next_page_token=token,
                    )
                )
                events.extend(more.events)
                token = more.next_page_token
            decisions = self.plan(events)
            try:
                await self.decide(task, *decisions)
            except grpc.aio.AioRpcError as exc:
                # The task timed out while we decided: the next one will come.
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
                continue
            if decisions and decisions[-1].HasField("complete_workflow"):
                last = (await self.history())[-1]
                if last.type == "WorkflowSuccess":
                    return

    async def run_activities(self, done: asyncio.Event) -> None:
        while not done.is_set():
            task = await self.poll_activity(self.activity_list)
            if not task.task_token:
                continue
            try:
                await self.finish_activity(task, {"activity": task.activity_id})
            except grpc.aio.AioRpcError as exc:
                # It timed out (start-to-close) before we answered: rescheduled later.
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc


async def test_kill9_loses_no_acknowledged_work(node: ServerProcess) -> None:
    async with node.channel() as channel:
        stub = sg.WorkflowServiceStub(channel)
        flows = [Flow(stub, i) for i in range(N_WORKFLOWS)]

        # Every workflow: three activities and two timers scheduled.
        for wf in flows:
            await wf.start(decider_timeout=dur(2))
            first = await wf.poll_decision()
            assert first.task_token
            await wf.decide(
                first,
                *(
                    schedule(a, f"task-{a}", wf.activity_list, start_to_close=STC)
                    for a in ACTIVITIES
                ),
                *(timer(tid, secs) for tid, secs in TIMERS.items()),
            )
        # a0 completes (acknowledged), a1 is started by a runner that then "dies" with
        # the server, a2 is never started.
        for wf in flows:
            a0 = await wf.poll_activity(wf.activity_list)
            assert a0.activity_id == "a0"
            await wf.finish_activity(a0)
            a1 = await wf.poll_activity(wf.activity_list)
            assert a1.activity_id == "a1"
        for wf in flows:
            await wf.signal("s0")
        # The decision task a0's success scheduled: started and left hanging on even
        # workflows, answered with a marker on odd ones.
        for wf in flows:
            second = await wf.poll_decision()
            assert second.task_token
            if wf.index % 2:
                await wf.decide(second, marker(f"before-kill-{wf.index}"))
        for wf in flows:
            await wf.signal("s1")

        # What the server acknowledged, as read back from it just before the crash.
        before = {wf.workflow_id: await wf.history() for wf in flows}
        fire_times = []
        for wf in flows:
            desc = await stub.DescribeWorkflow(
                s.DescribeWorkflowRequest(
                    namespace=wf.namespace,
                    execution=c.WorkflowExecution(workflow_id=wf.workflow_id),
                )
            )
            fire_times += [
                t.fire_time.ToDatetime(tzinfo=UTC).timestamp()
                for t in desc.pending_timers
                if t.timer_id == "t1"
            ]
        assert len(fire_times) == N_WORKFLOWS, "t1 fired before the kill: machine too slow"

    node.kill9()
    # Stay down until every t1 is overdue, so it must be fired by the restarted node.
    due = max(fire_times) + 0.2
    await wait_until(lambda: _passed(due), timeout=TIMERS["t1"] + 5)
    await node.restart()

    async with node.channel() as channel:
        stub = sg.WorkflowServiceStub(channel)
        for wf in flows:
            wf.stub = stub
        # A retry of an acknowledged signal (same request id) is still recognised.
        await flows[0].signal("s0")

        done = asyncio.Event()
        runners = [asyncio.create_task(wf.run_activities(done)) for wf in flows]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(wf.decide_until_closed() for wf in flows)), timeout=60
            )
        finally:
            done.set()
            await asyncio.gather(*runners)

        for wf in flows:
            _check_history(wf, before[wf.workflow_id], await wf.history())


async def _passed(at: float) -> bool:
    return time.time() > at


def _check_history(wf: Flow, before: list[h.HistoryEvent], after: list[h.HistoryEvent]) -> None:
    where = f"workflow {wf.index} ({wf.workflow_id})"
    types = [e.type for e in after]
    assert types[-1] == "WorkflowSuccess", f"{where}: {types}"
    assert [e.event_id for e in after] == list(range(1, len(after) + 1)), where

    # Nothing acknowledged is lost or altered.
    assert len(after) >= len(before), where
    for old, new in zip(before, after, strict=False):
        assert old == new, f"{where}: event {old.event_id} changed across the crash"

    # Timers: each fires once; t1 was pending at the kill and fired after the restart.
    expired = Counter(e.timer_expired.timer_id for e in after if e.type == "TimerExpired")
    assert expired == Counter(TIMERS.keys()), f"{where}: {expired}"
    assert not any(e.type == "TimerExpired" for e in before), where

    # Activities: every attempt started at most once and closed exactly once, and
    # every activity id succeeded exactly once.
    activity_of = {
        e.event_id: e.activity_scheduled.activity_id for e in after if e.type == "ActivityScheduled"
    }
    started = Counter(
        e.activity_started.scheduled_event_id for e in after if e.type == "ActivityStarted"
    )
    assert all(n == 1 for n in started.values()), f"{where}: {started}"
    closes = Counter(
        getattr(e, e.WhichOneof("attributes")).scheduled_event_id
        for e in after
        if e.type in ACTIVITY_CLOSES
    )
    assert closes == Counter(activity_of.keys()), f"{where}: {closes} vs {activity_of}"
    succeeded = Counter(
        activity_of[e.activity_success.scheduled_event_id]
        for e in after
        if e.type == "ActivitySuccess"
    )
    assert succeeded == Counter(ACTIVITIES), f"{where}: {succeeded}"
    # a1 was started before the crash and its runner never answered: it timed out.
    a1_first = min(sid for sid, aid in activity_of.items() if aid == "a1")
    outcome = [
        e.type
        for e in after
        if e.type in ACTIVITY_CLOSES
        and getattr(e, e.WhichOneof("attributes")).scheduled_event_id == a1_first
    ]
    assert outcome == ["ActivityTimedOut"], f"{where}: {outcome}"

    # Every acknowledged signal is there exactly once, with its input.
    signals = Counter(
        (e.signal.signal_name, e.signal.input.data) for e in after if e.type == "Signal"
    )
    assert signals == Counter(
        (name, payload({"wf": wf.index, "signal": name}).data) for name in SIGNALS
    ), f"{where}: {signals}"

    # The decision task left started at the kill (even workflows) timed out after restart.
    timed_out = [e for e in after if e.type == "DeciderTimedOut"]
    if wf.index % 2 == 0:
        assert timed_out and timed_out[0].event_id > len(before), f"{where}: {types}"

    # The marker acknowledged before the kill (odd workflows) is there once.
    markers = [e.marker.marker_name for e in after if e.type == "Marker"]
    assert markers == ([f"before-kill-{wf.index}"] if wf.index % 2 else []), where
