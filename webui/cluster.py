"""The namespace's locks (holder and queue) and task lists (pollers, backlog)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from webui.context import ui_of
from webui.runs import run_url
from webui.segments import segment

# A poller last seen longer ago than this is not "polling now".
POLLER_RECENT = timedelta(minutes=2)


async def locks_page(request: Request) -> Response:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    client = await ui.client(request, ns)
    locks = sorted(await client.list_locks(), key=lambda lock: lock.lock_name)
    return ui.render(
        request,
        "locks.html",
        namespace=ns,
        locks=locks,
        run_url=lambda wid, rid: run_url(ns, wid, rid),
        ns_url=f"/namespaces/{segment(ns)}",
    )


async def task_lists_page(request: Request) -> Response:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    client = await ui.client(request, ns)
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    listed = await client.list_task_lists()
    for tl in listed.task_lists:
        recent = [
            p
            for p in tl.pollers
            if p.last_access_time is not None and now - p.last_access_time <= POLLER_RECENT
        ]
        rows.append(
            {
                "tl": tl,
                "recent": recent,
                "warning": tl.backlog > 0 and not recent,
            }
        )
    rows.sort(key=lambda r: (not r["warning"], r["tl"].name, r["tl"].kind))
    return ui.render(
        request,
        "task_lists.html",
        namespace=ns,
        rows=rows,
        truncated=listed.truncated,
        recent=POLLER_RECENT,
        ns_url=f"/namespaces/{segment(ns)}",
    )
