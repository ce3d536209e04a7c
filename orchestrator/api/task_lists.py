"""ListTaskLists: every task list of a namespace at a glance (the web UI's task
lists page, an operator's first look at where work waits)."""

from __future__ import annotations

import time

from orchestrator.engine.derived import ACTIVITY, DECISION
from orchestrator.store.rows import TaskListKey
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s

from . import validate
from .common import POLLERS_SEEN_WITHIN, Ctx, ServiceBase, timestamp
from .errors import grpc_errors

MAX_TASK_LISTS = 1000
# Poller rows read at most: a namespace with more has bigger problems than this page.
MAX_POLLER_ROWS = 10_000
_KIND_ENUMS = {DECISION: c.TASK_LIST_KIND_DECISION, ACTIVITY: c.TASK_LIST_KIND_ACTIVITY}
_KIND_ORDER = {DECISION: 0, ACTIVITY: 1}


class TaskListsApi(ServiceBase):
    @grpc_errors
    async def ListTaskLists(self, req: s.ListTaskListsRequest, ctx: Ctx) -> s.ListTaskListsResponse:
        ns = validate.namespace(req.namespace)
        backlogs = await self._store.task_list_backlogs(ns, MAX_TASK_LISTS + 1)
        truncated = len(backlogs) > MAX_TASK_LISTS
        waiting = {TaskListKey(ns, kind, name): (n, at) for kind, name, n, at in backlogs}
        # Every node's written sightings, and this node's not written yet.
        seen: dict[TaskListKey, dict[str, float]] = {}
        rows = await self._store.namespace_pollers(ns, POLLERS_SEEN_WITHIN, MAX_POLLER_ROWS)
        for key, identity, moment in rows:
            seen.setdefault(key, {})[identity] = moment.timestamp()
        since = time.time() - POLLERS_SEEN_WITHIN.total_seconds()
        for key, identity, at in self._pollers.recent_in(ns, since):
            known = seen.setdefault(key, {})
            known[identity] = max(at, known.get(identity, 0.0))
        keys = sorted(
            set(waiting) | set(seen), key=lambda k: (k.task_list, _KIND_ORDER.get(k.kind, 2))
        )
        if len(keys) > MAX_TASK_LISTS:
            truncated, keys = True, keys[:MAX_TASK_LISTS]
        resp = s.ListTaskListsResponse(truncated=truncated)
        for key in keys:
            backlog, oldest = waiting.get(key, (0, None))
            info = resp.task_lists.add(
                name=key.task_list, kind=_KIND_ENUMS.get(key.kind, 0), backlog=backlog
            )
            if oldest is not None:
                info.oldest_task_time.CopyFrom(timestamp(oldest))
            pollers = sorted(seen.get(key, {}).items(), key=lambda item: item[1], reverse=True)
            for identity, last in pollers:
                info.pollers.add(identity=identity, last_access_time=timestamp(last))
        return resp
