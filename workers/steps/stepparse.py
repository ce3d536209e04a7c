"""Reading one step of a definition: what it is (its type and shorthand, by
Brooklyn's resolution), its common keys, its inputs, and its type's own fields,
read by the type's parser from `steptypes`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from workers.steps.model import Step
from workers.steps.steptypes import STEP_TYPES
from workers.steps.steptypes.base import StepType
from workers.steps.syntax import (
    _NESTED_REPLAYABLE,
    _NULL,
    _STEP_REPLAYABLE,
    _Context,
    _entries,
    _Given,
    _Invalid,
    _line,
    _mapping,
    _text,
    _timedelta,
    _word,
)

_SHORTHAND_KEYS = ("step", "shorthand", "s")
_COMMON_KEYS = frozenset(
    {
        "id",
        "name",
        "condition",
        "input",
        "output",
        "next",
        "on-error",
        "timeout",
        "idempotent",
        "replayable",
    }
)


_IDEMPOTENT = {"yes": "yes", "true": "yes", "no": "no", "false": "no", "default": "default"}


def _step_list(node: yaml.Node, context: _Context) -> tuple[Step, ...]:
    """A list of steps, or a single step; null is none."""
    if isinstance(node, yaml.ScalarNode) and node.tag == _NULL:
        return ()
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    return tuple(_step(item, index, context) for index, item in enumerate(items))


def _handlers(node: yaml.Node, context: _Context) -> tuple[Step, ...]:
    context.handler_depth += 1
    try:
        return _step_list(node, context)
    finally:
        context.handler_depth -= 1


@dataclass(frozen=True)
class _Head:
    """What a step is: its type, its shorthand (if any) and its other keys."""

    kind: str
    kind_line: int
    shorthand: str | None
    entries: tuple[tuple[str, int, yaml.Node], ...] = ()


def _step(node: yaml.Node, index: int, context: _Context) -> Step:
    line = _line(node)
    if isinstance(node, yaml.SequenceNode):
        if not node.value:
            raise _Invalid(line, "an empty list is not a step")
        return Step("subworkflow", line, index, {"steps": _step_list(node, context)})
    if isinstance(node, yaml.ScalarNode):
        text = _text(node, "a step")
        if not text or not text.strip():
            raise _Invalid(line, "empty step")
        kind, rest = _split(text)
        return _build(_Head(kind, line, rest), line, index, context)
    assert isinstance(node, yaml.MappingNode)
    head = _head(node, context)
    if isinstance(head, yaml.Node):
        return _step(head, index, context)
    return _build(head, line, index, context)


def _split(text: str) -> tuple[str, str]:
    """A shorthand's type (its first word) and the rest."""
    words = text.split(None, 1)
    return words[0], (words[1].strip() if len(words) > 1 else "")


def _head(node: yaml.MappingNode, context: _Context) -> _Head | yaml.Node:
    """Brooklyn's resolution (§2): `type`, else a shorthand key, else `steps`
    (a subworkflow), else YAML's accidental split of `- log a: b`."""
    entries = tuple(_entries(node, context))
    keys = {key: (line, value) for key, line, value in entries}
    if "type" in keys:
        line, value = keys["type"]
        kind = (_text(value, "type") or "").strip()
        spec = STEP_TYPES.get(kind)
        for key in _SHORTHAND_KEYS:
            if key in keys and (spec is None or key not in spec.keys):
                raise _Invalid(
                    keys[key][0], f"give either `type:` or `{key}:` (shorthand), not both"
                )
        others = tuple(e for e in entries if e[0] != "type")
        return _Head(kind, _line(value), None, others)
    found = [key for key in _SHORTHAND_KEYS if key in keys]
    if len(found) > 1:
        raise _Invalid(keys[found[1]][0], f"give one of `{found[0]}:` and `{found[1]}:`")
    if found:
        return _shorthand_head(found[0], entries, keys[found[0]][1])
    if "steps" in keys:
        return _Head("subworkflow", _line(node), None, entries)
    if len(entries) == 1 and " " in entries[0][0]:
        key, line, value = entries[0]
        text = f"{key}: {context.span(value)}".strip()
        kind, rest = _split(text)
        return _Head(kind, line, rest)
    raise _Invalid(_line(node), "a step map needs `type:` or `step:` (a shorthand string)")


def _shorthand_head(
    key: str, entries: tuple[tuple[str, int, yaml.Node], ...], value: yaml.Node
) -> _Head | yaml.Node:
    if isinstance(value, yaml.MappingNode) and len(entries) == 1:
        return value  # `step: {…}` alone is the step itself
    text = _text(value, f"`{key}:`")
    if not text or not text.strip():
        raise _Invalid(_line(value), f"`{key}:` is empty")
    kind, rest = _split(text)
    return _Head(kind, _line(value), rest, tuple(e for e in entries if e[0] != key))


def _build(head: _Head, line: int, index: int, context: _Context) -> Step:
    spec = STEP_TYPES.get(head.kind)
    if spec is None:
        known = ", ".join(sorted(STEP_TYPES))
        raise _Invalid(head.kind_line, f"unknown step type {head.kind!r} (known: {known})")
    own, common, extra = _classify(head.entries, spec)
    fields = _common_fields(head.kind, common, extra, context)
    given = {name: node for name, (_, node) in own.items()}
    said: set[str] = set()
    if head.shorthand:
        for name, node in spec.shorthand(head.shorthand, head.kind_line).items():
            if name in given:
                raise _Invalid(own[name][0], f"`{name}` is given by the shorthand and as a key")
            given[name] = node
            said.add(name)
    args = spec.build(_Given(head.kind, line, given, frozenset(said), context, _step_list))
    if head.kind == "label":
        fields["id"] = _label_id(args.pop("label", None), fields.get("id"), line, context)
    if "on-error" in common:
        fields["on_error"] = _handlers(common["on-error"][1], context)
    return Step(type=head.kind, line=line, index=index, args=args, **fields)


def _label_id(label: str | None, step_id: str | None, line: int, context: _Context) -> str:
    if label is not None and step_id is not None:
        raise _Invalid(line, "`label ID` sets the id: remove `id:`")
    if label is None and step_id is None:
        raise _Invalid(line, "label needs an id: `label ID`")
    if label is not None:
        context.declare(label, line)
        return label
    assert step_id is not None
    return step_id


_Keyed = dict[str, tuple[int, yaml.Node]]


def _classify(
    entries: Sequence[tuple[str, int, yaml.Node]], spec: StepType
) -> tuple[_Keyed, _Keyed, _Keyed]:
    """Split a step map's keys: the type's own (by their canonical name), the
    common ones, and the rest (inputs). The type's own win: `if` takes
    `condition`, `retry` and `wait` take `timeout`, `goto` takes `next`."""
    own: _Keyed = {}
    common: _Keyed = {}
    extra: _Keyed = {}
    for key, line, value in entries:
        if key in spec.keys:
            name = spec.keys[key]
            if name in own:
                raise _Invalid(line, f"{key!r} repeats {name!r}: give one of them")
            own[name] = (line, value)
        elif key in _COMMON_KEYS:
            common[key] = (line, value)
        else:
            extra[key] = (line, value)
    return own, common, extra


def _common_fields(kind: str, common: _Keyed, extra: _Keyed, context: _Context) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "id" in common:
        node = common["id"][1]
        step_id = (_text(node, "id") or "").strip()
        if not step_id or any(c.isspace() for c in step_id):
            raise _Invalid(_line(node), f"id must be one word (got {step_id!r})")
        context.declare(step_id, _line(node))
        fields["id"] = step_id
    if "name" in common:
        fields["name"] = _text(common["name"][1], "name")
    if "condition" in common:
        fields["condition"] = context.plain(common["condition"][1])
    if "output" in common:
        fields["output"] = context.plain(common["output"][1])
        fields["has_output"] = True
    if "next" in common:
        fields["next"] = _jump(common["next"][1], "next", context)
    if "timeout" in common:
        fields["timeout"] = _timedelta(common["timeout"][1], "timeout")
    if "idempotent" in common:
        fields["idempotent"] = _word(common["idempotent"][1], "idempotent", _IDEMPOTENT)
    if "replayable" in common:
        allowed = _NESTED_REPLAYABLE if kind == "workflow" else _STEP_REPLAYABLE
        fields["replayable"] = _word(common["replayable"][1], "replayable", allowed)
    fields["input"] = _inputs(common.get("input"), extra, context)
    return fields


def _inputs(
    given: tuple[int, yaml.Node] | None, extra: _Keyed, context: _Context
) -> dict[str, Any]:
    """`input:` plus every key the step does not know (Brooklyn's rule)."""
    inputs = _mapping(given[1], context, "input") if given is not None else {}
    for key, (line, node) in extra.items():
        if key in inputs:
            raise _Invalid(line, f"{key!r} is given both as a key and in `input`")
        inputs[key] = context.plain(node)
    return inputs


def _jump(node: yaml.Node, what: str, context: _Context) -> str:
    target = (_text(node, what) or "").strip()
    if not target:
        raise _Invalid(_line(node), f"{what} needs a step id")
    context.jump(target, _line(node), what)
    return target
