"""The pages about runs: the list, one run, its history, timeline and steps."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk.errors import InvalidArgumentError
from sdk.events import CLOSE_TYPES, Event
from sdk.workflows import WorkflowDescription
from webui import steps_view
from webui import timeline as timelines
from webui.context import is_htmx, ui_of
from webui.segments import segment
from webui.service import RunFilter, history_slice, run_key, whole_history
from webui.service import runs_page as fetch_runs
from webui.summary import activity_attempts, children, run_events

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


def run_url(ns: str, workflow_id: str, run_id: str) -> str:
    parts = (segment(part) for part in (ns, workflow_id, run_id))
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
    outside = ValueError(f"{name}: {text!r} is not a time between 1970 and 9999")
    try:
        moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except OverflowError:
        raise outside from None
    if not 1970 <= moment.year <= 9999:
        raise outside
    return moment


# The previous pages' tokens travel in the URL (`back`), newest last, at most this many.
BACK_PAGES = 20
_FIRST_PAGE = "~"  # not a base64url character: the first page's (empty) token


async def runs_page(request: Request) -> Response:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    params = request.query_params
    form = {
        name: params.get(name, "").strip()
        for name in ("status", "type", "id", "task_list", "from", "to")
    }
    current = params.get("page", "")
    back = [t for t in params.get("back", "").split(".") if t][-BACK_PAGES:]
    error = ""
    runs: list[Any] = []
    counts: dict[str, int] | None = None
    next_link = prev_link = ""
    try:
        flt = RunFilter(
            status=form["status"] if form["status"] in (*STATUSES, "closed") else "",
            workflow_type=form["type"],
            workflow_id_prefix=form["id"],
            task_list=form["task_list"],
            started_after=_moment(form["from"], "from"),
            started_before=_moment(form["to"], "to"),
        )
        client = await ui.client(request, ns)
        page = await fetch_runs(client, flt, page_size=PAGE_SIZE, token=_token_bytes(current))
    except InvalidArgumentError as exc:
        error = f"INVALID_ARGUMENT: {exc.message}"
    except ValueError as exc:
        error = str(exc)
    else:
        runs, counts = list(page.runs), page.counts
        shown = {k: v for k, v in form.items() if v}
        if page.next_token:
            trail = [*back, current or _FIRST_PAGE][-BACK_PAGES:]
            next_link = "?" + urlencode(
                {**shown, "page": _token_text(page.next_token), "back": ".".join(trail)}
            )
        if back:
            previous = {} if back[-1] == _FIRST_PAGE else {"page": back[-1]}
            rest = {"back": ".".join(back[:-1])} if back[:-1] else {}
            prev_link = "?" + urlencode({**shown, **previous, **rest})
    tabs = []
    base = {k: v for k, v in form.items() if k != "status" and v}
    for status in ("", "open", "closed", *STATUSES[1:]):
        count = None
        if counts is not None:
            if not status:
                count = sum(counts.values())
            elif status == "closed":
                count = sum(n for s, n in counts.items() if s != "open")
            else:
                count = counts.get(status, 0)
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
        status=400 if error else 200,
        namespace=ns,
        runs=runs,
        form=form,
        tabs=tabs,
        error=error,
        next_link=next_link,
        prev_link=prev_link,
        first_link="?" + urlencode({k: v for k, v in form.items() if v}),
        paged=bool(current),
        run_url=lambda r: run_url(ns, r.workflow_id, r.run_id),
    )


async def find_run(request: Request) -> Response:
    """`/namespaces/NS/workflows?id=ID[&run=RUN]`: a form's way to a run, by
    the id as typed."""
    ui = ui_of(request)
    ns = request.path_params["ns"]
    wid = request.query_params.get("id", "")
    if not wid:
        return RedirectResponse(f"/namespaces/{segment(ns)}/runs", status_code=303)
    client = await ui.client(request, ns)
    info = (await client.describe(wid, run_id=request.query_params.get("run", ""))).info
    return RedirectResponse(run_url(ns, info.workflow_id, info.run_id), status_code=303)


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
    read = await run_events(client, ui.cache, info)
    started = read.started
    close = read.last if read.last is not None and read.last.type in CLOSE_TYPES else None
    found = children(read.scanned())
    attempts = activity_attempts(read.tail)
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
            {"id": wid, "href": run_url(ns, wid, c["run_id"]), **c} for wid, c in found.items()
        ],
        # Read in part: children and attempts are from these events only.
        partial=None if read.whole else (len(read.head), read.tail_first, info.history_length),
        attempts=attempts,
        is_steps=bool(started is not None and started.get("definition")),
        ns_url=f"/namespaces/{segment(ns)}",
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
        first = int(request.query_params.get("first", "1"))
    except ValueError:
        first = 1
    first = max(1, min(first, info.history_length + 1))
    part = await history_slice(client, ui.cache, info, first, HISTORY_PAGE)
    last_id = part.events[-1].event_id if part.events else first - 1
    base = run_url(ns, info.workflow_id, info.run_id)
    open_end = info.status == "open" and not part.next_event_id
    full = len(part.events) >= HISTORY_PAGE
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
        next_first=part.next_event_id or (last_id + 1 if open_end and full else 0),
        # Follow only on the page that reaches the end, while the run is open and
        # the page has room for more rows.
        live=open_end and not full,
        newer=last_id + 1 if open_end and full else 0,
        last_id=last_id,
        page_size=HISTORY_PAGE,
        is_steps=False,
        ns_url=f"/namespaces/{segment(ns)}",
    )


MAX_EVENT_ID = 2**63 - 1


async def history_after(request: Request) -> Response:
    """The rows after `after` (htmx appends them), then the follower for the next
    ones while the run is open and the page (from `first`) has room; once full, a
    link to the newer events. One history read a call, no describe."""
    ui = ui_of(request)
    ns = request.path_params["ns"]
    wid, rid = request.path_params["wid"], request.path_params["rid"]
    after = min(int(request.path_params["after"]), MAX_EVENT_ID - 1)
    try:
        first = max(1, min(int(request.query_params.get("first", "1")), after + 1))
    except ValueError:
        first = 1
    room = max(0, first + HISTORY_PAGE - 1 - after)
    client = await ui.client(request, ns)
    events: list[Event] = []
    if room:
        page = await client.history_page(wid, run_id=rid, first_event_id=after + 1, page_size=room)
        events = page.events
    last_id = events[-1].event_id if events else after
    closed = bool(events) and events[-1].type in CLOSE_TYPES
    full = last_id - first + 1 >= HISTORY_PAGE
    return ui.render(
        request,
        "_history_rows.html",
        events=events,
        base=run_url(ns, wid, rid),
        live=not closed and not full,
        newer=last_id + 1 if full and not closed else 0,
        first=first,
        last_id=last_id,
    )


def _window(request: Request) -> tuple[datetime, datetime] | None:
    try:
        t0 = _moment(request.query_params.get("t0", ""), "t0")
        t1 = _moment(request.query_params.get("t1", ""), "t1")
    except ValueError:
        return None
    return (t0, t1) if t0 is not None and t1 is not None and t0 < t1 else None


def _clamp(
    window: tuple[datetime, datetime] | None, start: datetime, end: datetime
) -> tuple[datetime, datetime] | None:
    """The window within the run (None: the whole run)."""
    if window is None:
        return None
    w0, w1 = max(window[0], start), min(window[1], end)
    return (w0, w1) if w0 < w1 and (w0, w1) != (start, end) else None


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
        "too_big": False,
        "is_steps": False,
        "ns_url": f"/namespaces/{segment(ns)}",
    }
    events = await whole_history(client, ui.cache, info)
    # An open run's drawing is redrawn from the cache, reading only new events; a
    # history too big to keep would be read whole each time: drawn once, not followed.
    context["live"] = context["live"] and ui.cache.holds(run_key(client, info))
    context["too_big"] = info.status == "open" and not context["live"]
    drawing = timelines.build_timeline(events, now=datetime.now(UTC))
    window = _clamp(window, drawing.start, drawing.end)
    context["query"] = _window_query(window, lane_offset)
    context["svg"] = timelines.render_svg(
        drawing, window=window, max_lanes=MAX_LANES, lane_offset=lane_offset
    )
    context["zoom"] = {
        name: _window_query(w, lane_offset)
        for name, w in timelines.zoom_windows(drawing, window).items()
    }
    count = len(drawing.lanes)
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
    selected = request.query_params.get("step") or None
    view = steps_view.step_view(source, events, selected=selected) if source else None
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
        modes=modes,
        is_steps=bool(source),
        ns_url=f"/namespaces/{segment(ns)}",
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
