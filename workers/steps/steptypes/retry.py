"""The `retry` step: its parser (limits and backoff checked when literal) and
its body (counts, waits, and where the retry goes on; the grammar is `retrying`)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import yaml

from workers.steps import expressions, retrying
from workers.steps.errors import Replay, StepError
from workers.steps.executor import (
    Entry,
    Frame,
    Run,
    _span,
)
from workers.steps.model import Step
from workers.steps.scope import StepScope, _util
from workers.steps.shorthand import _template
from workers.steps.steptypes.base import StepType
from workers.steps.syntax import (
    _Given,
    _Invalid,
    _keys,
    _line,
    _mapping,
    _same,
    _text,
    _word,
)

_REPLAY: dict[str, bool | str] = {
    "true": True,
    "yes": True,
    "false": False,
    "no": False,
    "force": "force",
}


def _parse_retry(given: _Given) -> dict[str, Any]:
    replay: bool | str | None = None
    if given.has("replay"):
        replay = _REPLAY[_word(given.nodes["replay"], "retry replay", _same(*_REPLAY))]
    target = given.text("from")
    if target is not None:
        target = target.strip()
        given.context.jump(target, given.line_of("from"), "retry from")
    if replay is False and not target:
        raise _Invalid(given.line, "retry with replay false needs a target: `next: ID`")
    return {
        "replay": replay,
        "from": target or None,
        "limit": _limits(given),
        "backoff": _backoff(given),
        "timeout": given.duration("timeout"),
        "hash": given.text("hash"),
    }


def _limits(given: _Given) -> tuple[str, ...]:
    node = given.nodes.get("limit")
    if node is None:
        return ()
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    limits: list[str] = []
    for item in items:
        text = (_text(item, "retry limit") or "").strip()
        if "${" not in text:
            try:
                retrying.parse_limit(text)
            except ValueError as exc:
                raise _Invalid(_line(item), f"retry limit: {exc}") from None
        limits.append(text)
    return tuple(limits)


def _backoff(given: _Given) -> str | dict[str, Any] | None:
    node = given.nodes.get("backoff")
    if node is None:
        return None
    spec: str | dict[str, Any]
    if isinstance(node, yaml.MappingNode):
        spec = _mapping(node, given.context, "retry backoff")
    else:
        spec = (_text(node, "retry backoff") or "").strip()
    if "${" not in str(spec):
        try:
            retrying.parse_backoff(spec)
        except ValueError as exc:
            raise _Invalid(_line(node), f"retry backoff: {exc}") from None
    return spec


async def _run_retry(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    spec = retrying.spec_from_args(step.args)
    run = frame.run
    in_handler = frame.error is not None
    key = str(expressions.interpolate(spec.hash, scope)) if spec.hash else _retry_hash(frame, step)
    records = run.retry_records.setdefault(key, [])
    now = run.ops.now
    cause = frame.error
    for limit in spec.limits:
        if retrying.limit_reached(limit, records, now):
            raise StepError("RetriesExceeded", f"retry limit reached ({_limit_text(limit)})", cause)
    if retrying.timed_out(spec.timeout, records, now):
        raise StepError("Timeout", "retry timeout reached", cause)
    wait = retrying.delay(spec.backoff, len(records), _jitter_rand(run, entry.key))
    if wait > timedelta(0):
        await run.ops.timer(f"{entry.key}:backoff", wait)
    records.append(run.ops.now)
    decision = retrying.continuation(spec, in_handler)
    if decision.kind == "goto":
        return frame.previous_output, decision.target
    if decision.kind == "resume":
        raise Replay("resume", force=decision.force)
    raise Replay("from", decision.target, force=decision.force)


def _retry_hash(frame: Frame, step: Step) -> str:
    # The retry step's place without the visit counts of the path (a handler's
    # frame is named after the failing step's visit), so every run of it shares
    # one count; foreach items and fan-out targets keep counts of their own.
    place = _VISITS.sub(r"\1", frame.path)
    return f"{place}{step.index}"


_VISITS = re.compile(r"(\d+)\.\d+")


def _limit_text(limit: retrying.Limit) -> str:
    parts = []
    if limit.count is not None:
        parts.append(str(limit.count))
    if limit.window is not None:
        parts.append(("in " if parts else "") + _span(limit.window))
    return " ".join(parts)


def _jitter_rand(run: Run, key: str) -> float:
    value: float = _util(run.ops.now, run.ops.run_id, key)["random"]
    return value


# -- the table -------------------------------------------------------------------------


TYPES: dict[str, StepType] = {
    "retry": StepType(
        _template(
            "[ ?${replay} replay ] [ from ${from} ] [ limit ${limit...} ]"
            " [ backoff ${backoff...} ] [ timeout ${timeout} ] [ hash ${hash} ]",
            "retry [replay] [from ID] [limit L] [backoff B] [timeout D] [hash KEY]",
        ),
        _keys("replay", "limit", "backoff", "timeout", "hash", next="from"),
        _parse_retry,
        _run_retry,
    ),
}
