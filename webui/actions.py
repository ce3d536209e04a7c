"""Actions: signal, cancel, terminate, replay a run; force-release a lock.

Each is a POST form that takes two steps: the first checks the input and asks
for a confirmation (nothing is sent), the second (`confirmed=yes`) calls the
service. Bad input is answered on the page and nothing is sent; a refusal by the
service is shown as its gRPC status and message. With htmx the answers replace a
box on the page; without JavaScript they are whole pages.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk.errors import WeftError
from webui.context import is_htmx, session_of, status_name, ui_of
from webui.runs import REPLAY_MODES, run_url
from webui.segments import segment
from webui.service import whole_history

MAX_INPUT = 256 * 1024


@dataclass
class Outcome:
    kind: str  # "confirm", "invalid", "refused", "done"
    title: str
    message: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    """The form's values, carried into the confirmation."""
    link: tuple[str, str] | None = None
    """(href, text): where to go next."""


def _respond(request: Request, outcome: Outcome, action_url: str, back: str) -> Response:
    ui = ui_of(request)
    if outcome.kind == "done" and not is_htmx(request):
        session_of(request).flash.append(("ok", outcome.message))
        return RedirectResponse(outcome.link[0] if outcome.link else back, status_code=303)
    status = {"invalid": 400, "refused": 409}.get(outcome.kind, 200)
    return ui.render(
        request,
        "_action.html" if is_htmx(request) else "action.html",
        # htmx swaps only 2xx answers: a refusal is still an answer to show.
        status=200 if is_htmx(request) else status,
        outcome=outcome,
        action_url=action_url,
        back=back,
        namespace=request.path_params["ns"],
    )


def _text(form: FormData, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


async def run_action(request: Request) -> Response:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    wid, rid = request.path_params["wid"], request.path_params["rid"]
    action = request.path_params["action"]
    back = run_url(ns, wid, rid)
    action_url = f"{back}/actions/{quote(action, safe='')}"
    form = await request.form()
    if not session_of(request).check_csrf(_text(form, "csrf")):
        outcome = Outcome(
            "invalid",
            "Not sent",
            "The form expired (no valid CSRF token): reload the page and try again.",
        )
        return _respond(request, outcome, action_url, back)
    checker = _CHECKS.get(action)
    if checker is None:
        return Response("no such action", status_code=404)
    fields, problem = checker(form)
    title = _TITLES[action].format(wid=wid, **fields)
    if problem:
        return _respond(
            request, Outcome("invalid", f"Not sent: {title}", problem, fields), action_url, back
        )
    if _text(form, "confirmed") != "yes":
        return _respond(
            request,
            Outcome("confirm", title, _confirm_text(action, fields), fields),
            action_url,
            back,
        )
    client = await ui.client(request, ns)
    try:
        if action == "signal":
            value = parse_input(fields["input"]) if fields["input"].strip() else None
            await client.signal(wid, fields["name"], value, run_id=rid)
            outcome = Outcome("done", title, f"Signal {fields['name']!r} sent to {wid}.")
        elif action == "cancel":
            await client.cancel(wid, run_id=rid, reason=fields["reason"])
            outcome = Outcome("done", title, f"Cancellation of {wid} requested.")
        elif action == "terminate":
            await client.terminate(wid, run_id=rid, reason=fields["reason"])
            outcome = Outcome("done", title, f"{wid} terminated.")
        else:
            outcome = await _replay(request, ns, wid, rid, fields, title)
    except WeftError as exc:
        outcome = Outcome(
            "refused", f"Refused: {title}", f"{status_name(exc)}: {exc.message}", fields
        )
    return _respond(request, outcome, action_url, back)


async def _replay(
    request: Request, ns: str, wid: str, rid: str, fields: dict[str, str], title: str
) -> Outcome:
    from workers.steps.definition import DefinitionError, parse
    from workers.steps.replay import ReplayRefused, resolve

    ui = ui_of(request)
    client = await ui.client(request, ns)
    info = (await client.describe(wid, run_id=rid)).info
    history = await whole_history(client, ui.cache, info)
    source = str(history[0].get("definition") or "") if history else ""
    if not source:
        return Outcome(
            "invalid", f"Not sent: {title}", f"{wid} is not a step workflow: only those replay."
        )
    try:
        point = resolve(
            parse(source, "<snapshot>"),
            history,
            fields["mode"],
            fields["step"],
            fields["force"] == "yes",
            workflow_id=wid,
            run_id=info.run_id,
        )
    except (ReplayRefused, DefinitionError) as exc:
        return Outcome("invalid", f"Not sent: {title}", f"Refused before sending: {exc}")
    except Exception as exc:  # a history the interpreter cannot follow: as replay_modes says
        return Outcome(
            "invalid", f"Not sent: {title}", f"Refused before sending: {type(exc).__name__}: {exc}"
        )
    replaying, new_run = await client.request_replay(
        wid,
        fields["mode"],  # type: ignore[arg-type]
        step=fields["step"],
        force=fields["force"] == "yes",
        point=point.to_json(),
        run_id=info.run_id,
        reason=fields["reason"],
    )
    if new_run:
        return Outcome(
            "done",
            title,
            f"Replaying {wid} as a new run {replaying}.",
            link=(run_url(ns, wid, replaying), "the new run"),
        )
    return Outcome("done", title, f"Replaying run {replaying} in place.")


def _check_signal(form: FormData) -> tuple[dict[str, str], str]:
    fields = {"name": _text(form, "name").strip(), "input": _text(form, "input")}
    if not fields["name"]:
        return fields, "Give the signal's name: it is empty."
    if len(fields["input"]) > MAX_INPUT:
        return fields, f"The input is over {MAX_INPUT // 1024} KiB."
    if fields["input"].strip():
        try:
            parse_input(fields["input"])
        except json.JSONDecodeError as exc:
            return (
                fields,
                f"The input is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            )
        except ValueError as exc:
            return fields, f"The input is not valid JSON: {exc}."
    return fields, ""


MAX_DEPTH = 100
"""As deep as the service takes a payload."""


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large for a number")
    return value


def parse_input(text: str) -> Any:
    """JSON the service will take: no NaN or Infinity, no number that overflows,
    no deeper than `MAX_DEPTH`, no lone surrogate. ValueError (JSONDecodeError for
    bad syntax) says why."""
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"it nests deeper than {MAX_DEPTH} levels") from None
    if _depth(value) > MAX_DEPTH:
        raise ValueError(f"it nests deeper than {MAX_DEPTH} levels")
    try:  # a lone surrogate (`"\ud800"`) is valid JSON but no UTF-8 can carry it
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise ValueError(
            "it holds a lone surrogate (\\ud800-\\udfff), which is no character"
        ) from None
    return value


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _check_reason(form: FormData) -> tuple[dict[str, str], str]:
    return {"reason": _text(form, "reason").strip()}, ""


def _check_replay(form: FormData) -> tuple[dict[str, str], str]:
    fields = {
        "mode": _text(form, "mode"),
        "step": _text(form, "step").strip(),
        "force": "yes" if _text(form, "force") == "yes" else "",
        "reason": _text(form, "reason").strip(),
    }
    if fields["mode"] not in REPLAY_MODES:
        return fields, "Choose how to replay."
    if fields["mode"] == "from" and not fields["step"]:
        return fields, "Replay from a step needs the step's id."
    if fields["mode"] != "from":
        fields["step"] = ""
    return fields, ""


_CHECKS = {
    "signal": _check_signal,
    "cancel": _check_reason,
    "terminate": _check_reason,
    "replay": _check_replay,
}
_TITLES = {
    "signal": "Signal {name!r} to {wid}",
    "cancel": "Cancel {wid}",
    "terminate": "Terminate {wid}",
    "replay": "Replay {wid} ({mode})",
    "release": "Force-release lock {lock!r}",
}


def _confirm_text(action: str, fields: dict[str, Any]) -> str:
    if action == "signal":
        shown = fields["input"].strip() or "no input"
        return f"Send signal {fields['name']!r} with {shown}?"
    if action == "cancel":
        return "Ask the run's decider to cancel it?"
    if action == "terminate":
        return "Close the run now, without asking its decider? This cannot be undone."
    if action == "release":
        return (
            "Take the lock from its holder and give it to the next waiter? The holder is not asked."
        )
    mode = REPLAY_MODES.get(fields.get("mode", ""), "")
    return f"Replay {mode}{' ' + fields['step'] if fields.get('step') else ''}?"


async def release_lock(request: Request) -> Response:
    ui = ui_of(request)
    ns = request.path_params["ns"]
    back = f"/namespaces/{segment(ns)}/locks"
    action_url = back + "/release"
    form = await request.form()
    fields = {"lock": _text(form, "lock").strip(), "reason": _text(form, "reason").strip()}
    title = _TITLES["release"].format(**fields)
    if not session_of(request).check_csrf(_text(form, "csrf")):
        outcome = Outcome(
            "invalid",
            "Not sent",
            "The form expired (no valid CSRF token): reload the page and try again.",
        )
    elif not fields["lock"]:
        outcome = Outcome("invalid", "Not sent", "Give the lock's name.", fields)
    elif _text(form, "confirmed") != "yes":
        outcome = Outcome("confirm", title, _confirm_text("release", fields), fields)
    else:
        client = await ui.client(request, ns)
        try:
            done = await client.force_release_lock(fields["lock"], reason=fields["reason"])
            granted = (
                f"; now held by {done.granted_workflow_id}" if done.granted_workflow_id else ""
            )
            outcome = Outcome(
                "done",
                title,
                f"Lock {fields['lock']!r} taken from {done.released_workflow_id}{granted}.",
            )
        except WeftError as exc:
            outcome = Outcome(
                "refused", f"Refused: {title}", f"{status_name(exc)}: {exc.message}", fields
            )
    return _respond(request, outcome, action_url, back)
