"""The pages about runs: the list, one run, its history, timeline and steps."""

from __future__ import annotations

import base64
import binascii
import importlib
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk.events import CLOSE_TYPES, Event
from sdk.workflows import WorkflowDescription
from webui.app import is_htmx, ui_of
from webui.service import RunFilter, history_slice, whole_history
from webui.service import runs_page as fetch_runs

PAGE_SIZE = 50
HISTORY_PAGE = 100
STATUSES = (
    "open",
    "completed",
    "failed",
    "canceled",
    "terminated",
    "continued_as_new",
    "timed_out",
)
# Runs whose whole history the run page reads (children, close event) while open.
SMALL_HISTORY = 2000


def optional(module: str) -> Any | None:
    """A module of the UI written beside this one (timeline, steps), or None until it is."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def run_url(ns: str, workflow_id: str, run_id: str) -> str:
    parts = (quote(part, safe="") for part in (ns, workflow_id, run_id))
    return "/namespaces/{}/runs/{}/{}".format(*parts)


def _token_text(token: bytes) -> str:
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def _token_bytes(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return b""


def _moment(text: str, name: str) -> datetime | None:
    """A time from a filter field: ISO 8601 or the browser's datetime-local (UTC)."""
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a time like 2026-11-25T14:30") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def runs_page(request: Request) -> Response:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    params = request.query_params
    form = {
        name: params.get(name, "").strip()
        for name in ("status", "type", "id", "task_list", "from", "to")
    }
    error = ""
    try:
        flt = RunFilter(
            status=form["status"] if form["status"] in (*STATUSES, "closed") else "",
            workflow_type=form["type"],
            workflow_id_prefix=form["id"],
            task_list=form["task_list"],
            started_after=_moment(form["from"], "from"),
            started_before=_moment(form["to"], "to"),
        )
    except ValueError as exc:
        error = str(exc)
        flt = None
    runs: list[Any] = []
    counts: dict[str, int] | None = None
    next_link = ""
    if flt is not None:
        client = await ui.client(request, ns)
        page = await fetch_runs(
            client, flt, page_size=PAGE_SIZE, token=_token_bytes(params.get("page", ""))
        )
        runs, counts = list(page.runs), page.counts
        if page.next_token:
            next_link = "?" + urlencode({**form, "page": _token_text(page.next_token)})
    tabs = []
    base = {k: v for k, v in form.items() if k != "status" and v}
    for status in ("", *STATUSES):
        count = None
        if counts is not None:
            count = sum(counts.values()) if not status else counts.get(status, 0)
        query = urlencode({**base, "status": status} if status else base)
        tabs.append(
            {
                "status": status or "all",
                "count": count,
                "href": "?" + query,
                "on": form["status"] == status,
            }
        )
    return ui.render(
        request,
        "runs.html",
        namespace=ns,
        runs=runs,
        form=form,
        tabs=tabs,
        error=error,
        next_link=next_link,
        first_link="?" + urlencode({k: v for k, v in form.items() if v}),
        paged=bool(params.get("page")),
        run_url=lambda r: run_url(ns, r.workflow_id, r.run_id),
    )


async def current_run(request: Request) -> Response:
    """`/namespaces/NS/workflows/ID`: the open run of that id, else its latest."""
    ui = ui_of(request)
    ns = request.path_params["ns"]
    info = (await (await ui.client(request, ns)).describe(request.path_params["wid"])).info
    return RedirectResponse(run_url(ns, info.workflow_id, info.run_id), status_code=303)


async def _describe(request: Request) -> tuple[str, WorkflowDescription]:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    client = await ui.client(request, ns)
    desc = await client.describe(request.path_params["wid"], run_id=request.path_params["rid"])
    return ns, desc


def _links(ns: str, desc: WorkflowDescription, started: Event | None) -> list[dict[str, str]]:
    info = desc.info
    out = []
    if started is not None and started.get("parent_workflow_id"):
        out.append(
            {
                "label": "parent",
                "href": run_url(
                    ns, started.get("parent_workflow_id"), started.get("parent_run_id", "")
                ),
                "text": f"{started.get('parent_workflow_id')} / {started.get('parent_run_id', '')}",
            }
        )
    for label, rid in (
        ("continued from", info.continued_from_run_id),
        ("replay of", info.replay_of_run_id),
        ("replayed by", info.replayed_by_run_id),
    ):
        if rid:
            out.append({"label": label, "href": run_url(ns, info.workflow_id, rid), "text": rid})
    return out


async def run_page(request: Request) -> Response:
    ui = ui_of(request)
    ns, desc = await _describe(request)
    info = desc.info
    client = await ui.client(request, ns)
    events: list[Event] = []
    if info.status != "open" or info.history_length <= SMALL_HISTORY:
        events = await whole_history(client, ui.cache, info)
        started = events[0] if events else None
        close = events[-1] if events and events[-1].type in CLOSE_TYPES else None
    else:
        first = await history_slice(client, ui.cache, info, 1, 1)
        started, close = (first.events[0] if first.events else None), None
    children: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.type.startswith("ChildWorkflow") and event.get("workflow_id"):
            child = children.setdefault(event.get("workflow_id"), {"run_id": "", "state": ""})
            child["run_id"] = event.get("run_id") or child["run_id"]
            child["state"] = event.type.removeprefix("ChildWorkflow").lower() or child["state"]
    if close is not None and close.type == "WorkflowContinuedAsNew":
        continued = close.get("new_run_id", "")
    else:
        continued = ""
    return ui.render(
        request,
        "run.html",
        namespace=ns,
        desc=desc,
        info=info,
        tab="summary",
        base=run_url(ns, info.workflow_id, info.run_id),
        started=started,
        close=close,
        links=_links(ns, desc, started),
        continued=run_url(ns, info.workflow_id, continued) if continued else "",
        children=[
            {"id": wid, "href": run_url(ns, wid, c["run_id"]), **c} for wid, c in children.items()
        ],
        is_steps=bool(started is not None and started.get("definition")),
        ns_url=f"/namespaces/{quote(ns, safe='')}",
    )


async def run_status(request: Request) -> Response:
    """The run's status badge (htmx refreshes it while the run is open)."""
    ns, desc = await _describe(request)
    info = desc.info
    return ui_of(request).render(
        request,
        "_run_status.html",
        desc=desc,
        info=info,
        base=run_url(ns, info.workflow_id, info.run_id),
    )


async def history_page(request: Request) -> Response:
    ui = ui_of(request)
    ns, desc = await _describe(request)
    info = desc.info
    client = await ui.client(request, ns)
    try:
        first = max(1, int(request.query_params.get("first", "1")))
    except ValueError:
        first = 1
    part = await history_slice(client, ui.cache, info, first, HISTORY_PAGE)
    last_id = part.events[-1].event_id if part.events else first - 1
    base = run_url(ns, info.workflow_id, info.run_id)
    return ui.render(
        request,
        "history.html",
        namespace=ns,
        desc=desc,
        info=info,
        tab="history",
        base=base,
        events=part.events,
        first=first,
        prev_first=max(1, first - HISTORY_PAGE) if first > 1 else 0,
        next_first=part.next_event_id,
        # Follow only on the page that reaches the end, while the run is open.
        live=info.status == "open" and not part.next_event_id,
        last_id=last_id,
        page_size=HISTORY_PAGE,
        is_steps=False,
        ns_url=f"/namespaces/{quote(ns, safe='')}",
    )


async def history_after(request: Request) -> Response:
    """The rows after `after` (htmx appends them), and the poller for the next ones
    while the run is open and the page has room."""
    ui = ui_of(request)
    ns, desc = await _describe(request)
    info = desc.info
    after = int(request.path_params["after"])
    client = await ui.client(request, ns)
    part = await history_slice(client, ui.cache, info, after + 1, HISTORY_PAGE)
    last_id = part.events[-1].event_id if part.events else after
    return ui.render(
        request,
        "_history_rows.html",
        events=part.events,
        base=run_url(ns, info.workflow_id, info.run_id),
        live=info.status == "open" or bool(part.next_event_id),
        last_id=last_id,
    )


def _window(request: Request) -> tuple[datetime, datetime] | None:
    try:
        t0 = _moment(request.query_params.get("t0", ""), "t0")
        t1 = _moment(request.query_params.get("t1", ""), "t1")
    except ValueError:
        return None
    return (t0, t1) if t0 is not None and t1 is not None and t0 < t1 else None


def _window_query(window: tuple[datetime, datetime] | None, lanes: int = 0) -> str:
    query: dict[str, Any] = {}
    if window is not None:
        query = {"t0": window[0].isoformat(), "t1": window[1].isoformat()}
    if lanes:
        query["lanes"] = lanes
    return "?" + urlencode(query) if query else ""


MAX_LANES = 200


async def _timeline(request: Request) -> dict[str, Any]:
    ui = ui_of(request)
    ns, desc = await _describe(request)
    info = desc.info
    client = await ui.client(request, ns)
    base = run_url(ns, info.workflow_id, info.run_id)
    module = optional("webui.timeline")
    window = _window(request)
    try:
        lane_offset = max(0, int(request.query_params.get("lanes", "0")))
    except ValueError:
        lane_offset = 0
    context: dict[str, Any] = {
        "namespace": ns,
        "desc": desc,
        "info": info,
        "tab": "timeline",
        "base": base,
        "svg": None,
        "zoom": {},
        "live": info.status == "open",
        "query": _window_query(window, lane_offset),
        "lane_pages": {},
        "lane_count": 0,
        "is_steps": False,
        "ns_url": f"/namespaces/{quote(ns, safe='')}",
    }
    if module is None:
        return context
    events = await whole_history(client, ui.cache, info)
    timeline = module.build_timeline(events, now=datetime.now(UTC))
    context["svg"] = module.render_svg(
        timeline, window=window, max_lanes=MAX_LANES, lane_offset=lane_offset
    )
    context["zoom"] = {
        name: _window_query(w, lane_offset)
        for name, w in module.zoom_windows(timeline, window).items()
    }
    count = len(timeline.lanes)
    context["lane_count"] = count
    if count > MAX_LANES:
        pages = {}
        if lane_offset > 0:
            pages["previous lanes"] = _window_query(window, max(0, lane_offset - MAX_LANES))
        if lane_offset + MAX_LANES < count:
            pages["next lanes"] = _window_query(window, lane_offset + MAX_LANES)
        context["lane_pages"] = pages
    return context


async def timeline_page(request: Request) -> Response:
    return ui_of(request).render(request, "timeline.html", **await _timeline(request))


async def timeline_fragment(request: Request) -> Response:
    return ui_of(request).render(request, "_timeline_svg.html", **await _timeline(request))


async def steps_page(request: Request) -> Response:
    ui = ui_of(request)
    ns, desc = await _describe(request)
    info = desc.info
    client = await ui.client(request, ns)
    events = await whole_history(client, ui.cache, info)
    source = str(events[0].get("definition") or "") if events else ""
    module = optional("webui.steps_view")
    selected = request.query_params.get("step") or None
    view = None
    if source and module is not None:
        view = module.step_view(source, events, selected=selected)
    modes = replay_modes(source, events, info.workflow_id, info.run_id) if source else []
    return ui.render(
        request,
        "steps.html",
        namespace=ns,
        desc=desc,
        info=info,
        tab="steps",
        base=run_url(ns, info.workflow_id, info.run_id),
        source=source,
        view=view,
        available=module is not None,
        modes=modes,
        is_steps=bool(source),
        ns_url=f"/namespaces/{quote(ns, safe='')}",
        htmx=is_htmx(request),
    )


REPLAY_MODES = {
    "resuming": "resume the current step",
    "last": "from the last replay point",
    "from_start": "from the start",
    "from": "from the replay point at or before a step",
}


def replay_modes(
    source: str, events: list[Event], workflow_id: str, run_id: str
) -> list[dict[str, str]]:
    """The replay modes this run allows now, each with why not when it does not."""
    from workers.steps.definition import DefinitionError, parse
    from workers.steps.replay import ReplayRefused, resolve

    try:
        definition = parse(source, "<snapshot>")
    except DefinitionError as exc:
        return [
            {"mode": m, "label": label, "refused": str(exc)} for m, label in REPLAY_MODES.items()
        ]
    out = []
    for mode, label in REPLAY_MODES.items():
        refused = ""
        if mode != "from":
            try:
                resolve(definition, events, mode, workflow_id=workflow_id, run_id=run_id)
            except ReplayRefused as exc:
                refused = str(exc)
            except Exception as exc:  # a history the interpreter cannot follow
                refused = f"{type(exc).__name__}: {exc}"
        out.append({"mode": mode, "label": label, "refused": refused})
    return out
