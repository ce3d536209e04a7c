"""A step workflow drawn as its steps: each step of the definition (nested blocks
flattened, with their depth) marked done, running, failed or not reached, the
variables at a chosen step, and the replay points, all read from the run's
history.

The interpreter records every step start in a `step` marker (`executor.Frame._start`):
its key — the frame's path, the step's index and its visit count, such as
`3.1`, `2.1.t/0.1` (an `if` branch), `4.1[2]/0.1` (a `foreach` item), `5.1!0.1`
(an `on-error` handler), `r42/3.1` (after the replay requested by event 42) —
with the variables as at entry and any replay-point change. Without the visit
counts and item positions a key names one step of the definition (its
"place"), which is how markers are matched to steps.

A step is *running* from its marker until a marker of a step outside it (the
step is left), *done* once left, and *failed* when the run failed while it was
running or its error is the one that failed the run. A replay in place
(`ReplayRequested`) takes the steps at and after its point back to not reached,
so the view is of the current path; a run that continues another (continue as
new, or the replay of a closed run) counts the steps before its first one as done.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk.events import Event
from workers.steps import continuation
from workers.steps.definition import DefinitionError, parse
from workers.steps.model import Step
from workers.steps.steptypes import STEP_TYPES

STATES = ("done", "running", "failed", "not-reached")
_LABEL_MAX = 90
_FAILED_CLOSES = frozenset(
    {"WorkflowFailed", "WorkflowTimedOut", "WorkflowTerminated", "WorkflowCanceled"}
)
_DONE_CLOSES = frozenset({"WorkflowSuccess", "WorkflowContinuedAsNew"})


@dataclass
class StepState:
    index: int
    """The position in `StepView.steps` (the definition's steps in order, nested ones flattened)."""
    id: str
    """The step's `id`, else its place (`3`, `2.t/0`, `5!0`, `workflow!0`): what
    `selected` names."""
    label: str
    """One line: `activity charge_card`, `sleep 5s`, `wait signal approve`, …"""
    state: str
    """"done", "running", "failed" or "not-reached"."""
    depth: int
    entered_event_id: int | None
    """The marker of its latest start on the current path (None: never, or in an earlier run)."""
    type: str = ""
    line: int = 0
    """Its line in the YAML."""
    place: str = ""
    visits: int = 0
    """How many times it started on the current path."""


@dataclass(frozen=True)
class ReplayPointView:
    step_id: str
    """The step a replay would go back to (`start` for the start of the workflow)."""
    event_id: int
    """The event that made it a replay point."""
    kind: str
    """"from start", "from here", "from here only", or "kept" (carried through a
    replay or a continue-as-new)."""


@dataclass
class StepView:
    steps: list[StepState]
    yaml: str
    selected: StepState | None
    variables: dict[str, Any]
    """As at entry to the selected step, else to the latest step started."""
    replay_points: list[ReplayPointView]
    """The workflow's replay points as they stand (those `weft replay --from` can use)."""
    input: dict[str, Any] = field(default_factory=dict)
    """The resolved input of that same step start."""
    variables_step: StepState | None = None
    """The step whose entry `variables` are (None: no step started)."""


# -- the definition, flattened -----------------------------------------------------------


@dataclass(eq=False)
class _Node:
    step: Step
    place: str
    depth: int
    parent: _Node | None
    label: str
    top: int
    """The index of its top-level ancestor (-1: the workflow's own on-error)."""
    boundary: bool = False
    """Whether its steps run in a frame of their own (a nested workflow, a foreach)."""
    state: str = "not-reached"
    entered: int | None = None
    visits: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def chain(self) -> Iterator[_Node]:
        node: _Node | None = self
        while node is not None:
            yield node
            node = node.parent


def _flatten(steps: Sequence[Step], on_error: Sequence[Step]) -> list[_Node]:
    nodes: list[_Node] = []

    def add(step: Step, place: str, depth: int, parent: _Node | None, prefix: str = "") -> None:
        top = parent.top if parent is not None else (int(place) if place.isdigit() else -1)
        step_type = STEP_TYPES.get(step.type)
        # A `workflow replayable …` / `retention …` step has no steps of its own.
        boundary = step_type is not None and step_type.own_frame and not step.args.get("setting")
        node = _Node(step, place, depth, parent, prefix + summary(step), top, boundary)
        nodes.append(node)
        args = step.args
        if step.type == "if":
            for branch, mark in (("then", "t"), ("else", "e")):
                for j, child in enumerate(args.get(branch) or ()):
                    add(child, f"{place}.{mark}/{j}", depth + 1, node, f"{branch}: ")
        elif step.type == "switch":
            for n, case in enumerate(args.get("cases") or ()):
                add(case, f"{place}.c{n}/0", depth + 1, node, f"case {n + 1}: ")
        elif step.type in ("foreach", "workflow", "subworkflow"):
            body = args.get("do") if step.type == "foreach" else args.get("steps")
            for j, child in enumerate(body or ()):
                add(child, f"{place}/{j}", depth + 1, node)
        # A nested workflow's on-error is each run of it's own (see
        # `workers.steps.steptypes.fanout._run_nested`).
        handlers = f"{place}/workflow!" if boundary and step.type == "workflow" else f"{place}!"
        for k, handler in enumerate(step.on_error):
            add(handler, f"{handlers}{k}", depth + 1, node, "on-error: ")

    for i, step in enumerate(steps):
        add(step, str(i), 0, None)
    for k, handler in enumerate(on_error):
        add(handler, f"workflow!{k}", 0, None, "on-error: ")
    return nodes


def summary(step: Step) -> str:
    """A step in one line, in the words of its shorthand."""
    a = step.args

    def arg(name: str) -> str:
        value = a.get(name)
        return "" if value is None else str(value)

    kind = step.type
    match kind:
        case "let" | "transform":
            text = f"{kind} {arg('var_type')} {arg('name') or 'value'} = {arg('value')}"
            if kind == "transform" and a.get("ops"):
                text += " | " + " | ".join(str(op) for op in a["ops"])
        case "log":
            text = f"log {arg('message')}"
        case "sleep":
            text = f"sleep {arg('duration')}"
        case "wait":
            text = f"wait signal {arg('signal')}"
            if a.get("timeout"):
                text += f" timeout {arg('timeout')}"
        case "goto":
            text = f"goto {arg('target')}"
        case "label":
            text = f"label {step.id or ''}"
        case "return":
            text = f"return {arg('value')}"
        case "fail":
            text = "fail" + (" rethrow" if a.get("rethrow") else "")
            if a.get("message"):
                text += f" message {arg('message')}"
        case "retry":
            text = "retry" + (" replay" if a.get("replay") else "")
            if a.get("from"):
                text += f" from {arg('from')}"
            if a.get("limit"):
                text += " limit " + " ".join(str(x) for x in a["limit"])
        case "if":
            test = a.get("test")
            target = test.get("target", test) if isinstance(test, dict) else test
            text = f"if {target}"
            if isinstance(test, dict) and "check" in test:
                text += f" == {test['check']}"
        case "switch":
            text = f"switch {arg('value')}"
        case "foreach":
            text = f"foreach {arg('var')} in {arg('items')}"
        case "workflow":
            setting = a.get("setting")
            if setting:
                text = f"workflow {setting} {arg(str(setting))}"
            else:
                text = "workflow" + (f" lock {arg('lock')}" if a.get("lock") else "")
                if a.get("has_target"):
                    text += f" over {arg('target')}"
        case "subworkflow":
            text = "steps"
        case "activity":
            text = f"activity {arg('activity_type')}"
        case "http":
            text = f"http {arg('url')}"
        case "shell":
            text = f"shell {arg('command')}"
        case "signal":
            text = f"signal {arg('workflow_id')} {arg('name')}"
        case "child":
            text = f"child {arg('workflow_type')}"
        case _:
            text = kind
    text = " ".join(text.split())
    if step.name:
        text = f"{step.name} ({text})"
    return text if len(text) <= _LABEL_MAX else text[: _LABEL_MAX - 1] + "…"


# -- the history -----------------------------------------------------------------------

_REPLAY_PREFIX = re.compile(r"^r\d+/")
_POSITION = re.compile(r"\[\d+\]")
_VISIT = re.compile(r"(\d+)\.\d+")


def place_of(key: str) -> str:
    """A marker's key without its replay prefix, item positions and visit counts."""
    return _VISIT.sub(r"\1", _POSITION.sub("", _REPLAY_PREFIX.sub("", key)))


class _Walk:
    """The markers of a history applied to the flattened steps, in order."""

    def __init__(self, nodes: list[_Node], from_start: bool) -> None:
        self.nodes = nodes
        self.replays_closed_run = False
        """This run replays a closed one: the steps before its point ran there."""
        self.by_place = {n.place: n for n in nodes}
        self.open: dict[int, _Node] = {}
        self.last: _Node | None = None
        self.marks: dict[int, ReplayPointView] = {}
        self.from_start = from_start

    def _id(self, node: _Node) -> str:
        return node.step.id or node.place

    def top_id(self, index: int) -> str:
        node = self.by_place.get(str(index))
        return self._id(node) if node is not None else str(index)

    def marker(self, event: Event, details: dict[str, Any]) -> None:
        node = self.by_place.get(place_of(str(details.get("key", ""))))
        if node is None:
            return
        keep = {id(n) for n in node.chain()}
        for key, other in list(self.open.items()):
            if key not in keep:
                other.state = "done"
                del self.open[key]
        for n in node.chain():
            if id(n) not in self.open:
                n.state = "running"
                self.open[id(n)] = n
        node.state, node.entered, node.details = "running", event.event_id, details
        node.visits += 1
        self.last = node
        change = details.get("replayable")
        if change:
            self._replayable(node, str(change), event.event_id)

    def _replayable(self, node: _Node, change: str, event_id: int) -> None:
        """`executor.Frame._replay_point`, for the workflow's own frame only (the
        one an operator's replay uses): a change inside an inline block marks
        the top-level step it is in."""
        if any(n.boundary for n in node.chain() if n is not node) or node.top < 0:
            return
        if change == "from here only":
            self.marks.clear()
        if change in ("from here", "from here only"):
            self.marks[node.top] = ReplayPointView(self.top_id(node.top), event_id, change)
        elif change == "reset":
            self.marks.clear()
        elif change == "from start":
            self.marks[-1] = ReplayPointView("start", event_id, change)

    def replay(self, event: Event) -> None:
        """A replay in place or into a new run: back to the point's step."""
        point = event.get("point")
        if not isinstance(point, dict) or not isinstance(point.get("index"), int):
            return  # the run fails on it; nothing moves
        index = int(point["index"])
        new_run = self.replays_closed_run
        for node in self.nodes:
            if node.top >= index or node.top < 0:
                node.state, node.entered, node.details, node.visits = "not-reached", None, {}, 0
            elif new_run:
                node.state = "done" if node.depth == 0 else node.state
            elif id(node) in self.open:
                node.state = "done"  # abandoned before the point (a forced replay)
        self.open.clear()
        self.last = None
        kept = self.marks.get(index)
        self.marks = {}
        if self.from_start:
            self.marks[-1] = ReplayPointView("start", event.event_id, "from start")
        if point.get("marked"):
            self.marks[index] = kept or ReplayPointView(self.top_id(index), event.event_id, "kept")

    def carried(self, event: Event, doc: dict[str, Any]) -> None:
        """A run that continues another as new: the steps before its first are done."""
        index = doc.get("index")
        if isinstance(index, int):
            for node in self.nodes:
                if node.depth == 0 and 0 <= node.top < index:
                    node.state = "done"
        self.marks = {}
        for mark in doc.get("marks") or ():
            if isinstance(mark, int):
                step_id = "start" if mark < 0 else self.top_id(mark)
                self.marks[mark] = ReplayPointView(step_id, event.event_id, "kept")

    def close(self, event: Event) -> None:
        if event.type in _DONE_CLOSES:
            for node in self.open.values():
                node.state = "done"
        elif event.type in _FAILED_CLOSES:
            for node in self.open.values():
                node.state = "failed"
            culprit = self._named_by(event)
            if culprit is not None:
                culprit.state = "failed"
        self.open.clear()

    def _named_by(self, event: Event) -> _Node | None:
        """The step the failure's error names (`StepError.step`: an id, or `step N`
        counted in its own block), the latest started of those it could be."""
        details = event.get("details")
        name = details.get("step") if isinstance(details, dict) else None
        if not name:
            return None
        found = [n for n in self.nodes if n.entered is not None and n.step.label == name]
        return max(found, key=lambda n: n.entered or 0) if found else None


def step_view(
    definition_yaml: str, events: Sequence[Event], *, selected: str | None = None
) -> StepView | None:
    """The run's steps as its history has them (None: not a step workflow, or a
    definition that does not parse). `selected`: a step's `StepState.id`."""
    if not definition_yaml or not definition_yaml.strip():
        return None
    try:
        definition = parse(definition_yaml, "<run>")
    except DefinitionError:
        return None
    nodes = _flatten(definition.steps, definition.on_error)
    from_start = definition.replayable == "from start"
    walk = _Walk(nodes, from_start)
    for event in events:
        kind = event.type
        if kind == "Marker" and event.get("marker_name") == "step":
            details = event.get("details")
            if isinstance(details, dict):
                walk.marker(event, details)
        elif kind == "ReplayRequested":
            walk.replay(event)
        elif kind == "WorkflowStarted":
            walk.replays_closed_run = bool(event.get("replay_of_run_id"))
            if from_start:
                walk.marks[-1] = ReplayPointView("start", event.event_id, "from start")
            doc = continuation.carried(event.get("input"))
            if doc is not None:
                walk.carried(event, doc)
        elif kind in _DONE_CLOSES or kind in _FAILED_CLOSES:
            walk.close(event)

    states = [
        StepState(
            index=i,
            id=node.step.id or node.place,
            label=node.label,
            state=node.state,
            depth=node.depth,
            entered_event_id=node.entered,
            type=node.step.type,
            line=node.step.line,
            place=node.place,
            visits=node.visits,
        )
        for i, node in enumerate(nodes)
    ]
    chosen = next((s for s in states if selected is not None and s.id == selected), None)
    source: _Node | None = nodes[chosen.index] if chosen is not None else None
    if source is None or source.entered is None:
        source = walk.last  # never started on this path: the latest step's
    details = source.details if source is not None else {}
    variables = details.get("variables")
    given = details.get("input")
    return StepView(
        steps=states,
        yaml=definition_yaml,
        selected=chosen,
        variables=dict(variables) if isinstance(variables, dict) else {},
        replay_points=[walk.marks[k] for k in sorted(walk.marks)],
        input=dict(given) if isinstance(given, dict) else {},
        variables_step=next((s for s, n in zip(states, nodes, strict=True) if n is source), None),
    )
