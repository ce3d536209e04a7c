"""A run prepared for fuzzing: open, with an activity, a timer, a lock request and
a marker behind it, a started activity task and a started decision task whose
tokens the fuzzed requests may use. Every timeout is a day long and every type
name its own, so nothing but the fuzzed calls can append to it while a test
watches its event count."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from tests.e2e.fuzz.strategies import KNOWN_IDS
from tests.e2e.fuzz.target import FuzzServer

ACTIVITY_ID, TIMER_ID, LOCK_NAME = KNOWN_IDS


def day() -> Duration:
    out = Duration()
    out.FromTimedelta(timedelta(days=1))
    return out


@dataclass(frozen=True)
class PreparedRun:
    workflow_id: str
    run_id: str
    task_list: str
    activity_list: str
    type_name: str
    decision_token: bytes
    activity_token: bytes
    page_token: bytes

    @property
    def execution(self) -> c.WorkflowExecution:
        return c.WorkflowExecution(workflow_id=self.workflow_id, run_id=self.run_id)


def _poll_decision(server: FuzzServer, task_list: str) -> s.PollForDecisionTaskResponse:
    task: s.PollForDecisionTaskResponse = server.stub.PollForDecisionTask(
        s.PollForDecisionTaskRequest(task_list=task_list, identity="fuzz")
    )
    assert task.task_token, f"no decision task on {task_list}"
    return task


def prepare_run(server: FuzzServer, *, with_work: bool = True) -> PreparedRun:
    """Start a run and leave its decision task started; `with_work` first has it
    schedule an activity (started too), a timer, a lock request and a marker."""
    tag = uuid.uuid4().hex[:10]
    workflow_id, task_list, activity_list = f"fz-{tag}", f"fz-d-{tag}", f"fz-a-{tag}"
    type_name = f"fz-type-{tag}"
    run_id = server.stub.StartWorkflow(
        s.StartWorkflowRequest(
            workflow_id=workflow_id,
            workflow_type=c.WorkflowType(name=type_name),
            task_list=task_list,
            input=c.Payload(data=json.dumps({"n": 1}).encode(), encoding="json"),
            execution_timeout=day(),
            decider_timeout=day(),
        )
    ).run_id
    activity_token = b""
    if with_work:
        first = _poll_decision(server, task_list)
        schedule = d.ScheduleActivityDecision(
            activity_id=ACTIVITY_ID,
            activity_type=c.ActivityType(name=type_name),
            task_list=activity_list,
            schedule_to_start_timeout=day(),
            start_to_close_timeout=day(),
            schedule_to_close_timeout=day(),
            heartbeat_timeout=day(),
        )
        server.stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(
                task_token=first.task_token,
                decisions=[
                    d.Decision(schedule_activity=schedule),
                    d.Decision(
                        start_timer=d.StartTimerDecision(
                            timer_id=TIMER_ID, start_to_fire_timeout=day()
                        )
                    ),
                    d.Decision(request_lock=d.RequestLockDecision(lock_name=LOCK_NAME)),
                    d.Decision(record_marker=d.RecordMarkerDecision(marker_name="m")),
                ],
            )
        )
        activity = server.stub.PollForActivityTask(
            s.PollForActivityTaskRequest(task_list=activity_list, identity="fuzz")
        )
        assert activity.task_token, "no activity task"
        activity_token = activity.task_token
        server.stub.SignalWorkflow(
            s.SignalWorkflowRequest(
                execution=c.WorkflowExecution(workflow_id=workflow_id), signal_name="wake"
            )
        )
    decision = _poll_decision(server, task_list)
    page = server.stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(
            execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id), page_size=1
        )
    )
    return PreparedRun(
        workflow_id=workflow_id,
        run_id=run_id,
        task_list=task_list,
        activity_list=activity_list,
        type_name=type_name,
        decision_token=decision.task_token,
        activity_token=activity_token,
        page_token=page.next_page_token,
    )
