"""What the modules of the definition parser share: the YAML read with its
lines, the context collected across a whole definition, and readers of values
off YAML nodes.

`${…}` is kept as text even inside YAML flow collections (see `definition`),
timestamps stay text, and duplicate keys are errors. Every problem is an
`_Invalid` at a line; `definition.parse` adds the file name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from sdk import retention
from sdk.durations import parse_duration
from workers.steps import yamlbound
from workers.steps.errors import StepInterpreterError
from workers.steps.model import RESERVED_IDS, Step

# -- reading YAML ----------------------------------------------------------------------


class _Invalid(StepInterpreterError):
    """A problem at a line; `parse` adds the file name."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line, self.reason = line, reason


# A `${…}` is swapped for a placeholder YAML reads as a plain word, and swapped
# back in every scalar once composed. Quotes and backslashes are left out so a
# quoted scalar's escapes are never hidden from YAML.
_EXPRESSION = re.compile(r"\$\{[^{}\n\"'\\]*\}")
_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"\\$\\{_OPEN}(\\d+){_CLOSE}")
_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"


@dataclass(frozen=True)
class _Source:
    """The text YAML read (placeholders in) and how to undo the placeholders."""

    text: str
    expressions: tuple[str, ...]

    def restore(self, value: str) -> str:
        if not self.expressions or _OPEN not in value:
            return value
        return _PLACEHOLDER.sub(lambda m: self.expressions[int(m.group(1))], value)


def _compose(text: str) -> tuple[yaml.Node | None, _Source]:
    source = _protect(text)
    try:
        root = yaml.compose(source.text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise _Invalid(line, source.restore(_yaml_reason(exc))) from None
    except yaml.YAMLError as exc:  # the reader: characters YAML does not allow
        position = getattr(exc, "position", 0)
        line = source.text.count("\n", 0, position) + 1
        raise _Invalid(line, getattr(exc, "reason", "") or "unreadable YAML") from None
    if root is not None:
        try:
            # Before anything walks it: nested anchors stand for billions of nodes.
            yamlbound.check_expansion(root)
        except yamlbound.AliasBomb as exc:
            raise _Invalid(exc.line, exc.message) from None
        _restore_and_check(root, source)
    return root, source


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's context and problem as one sentence (its own text spans lines)."""
    problem = exc.problem or str(exc)
    if not exc.context:
        return problem
    return f"{exc.context}{',' if problem.startswith('but ') else ':'} {problem}"


def _protect(text: str) -> _Source:
    if _OPEN in text or _CLOSE in text:
        return _Source(text, ())
    found: list[str] = []

    def swap(match: re.Match[str]) -> str:
        found.append(match.group(0))
        return f"${_OPEN}{len(found) - 1}{_CLOSE}"

    return _Source(_EXPRESSION.sub(swap, text), tuple(found))


def _restore_and_check(root: yaml.Node, source: _Source) -> None:
    """Put the `${…}` back into every scalar, and refuse duplicate keys (YAML
    would keep the last one silently)."""
    seen: set[int] = set()
    pending = [root]
    while pending:
        node = pending.pop()
        if id(node) in seen:  # aliases share nodes, and may even loop
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            node.value = source.restore(node.value)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            _check_keys(node, source)
            pending.extend(part for pair in node.value for part in pair)


def _check_keys(node: yaml.MappingNode, source: _Source) -> None:
    lines: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value == "<<":  # `<<` merges
            continue
        text = source.restore(key.value)
        if text in lines:
            raise _Invalid(_line(key), f"duplicate key {text!r} (first on line {lines[text]})")
        lines[text] = _line(key)


class _Constructor(SafeConstructor):
    """YAML's safe values, except that timestamps stay text."""


_Constructor.add_constructor(
    "tag:yaml.org,2002:timestamp",
    _Constructor.construct_yaml_str,  # type: ignore[type-var]  # the stubs want a Loader
)


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1 if node.start_mark is not None else 1


def _synthetic(value: str | bool, line: int) -> yaml.ScalarNode:
    """A node for what a shorthand said, so shorthand and keys read alike."""
    mark = yaml.Mark("", 0, line - 1, 0, None, 0)
    if isinstance(value, bool):
        return yaml.ScalarNode(_BOOL, "true" if value else "false", mark, mark)
    return yaml.ScalarNode(_STR, value, mark, mark, style="'")


@dataclass
class _Context:
    """What parsing collects across the whole definition."""

    source: _Source
    ids: dict[str, int] = field(default_factory=dict)
    targets: list[tuple[str, int, str]] = field(default_factory=list)
    handler_depth: int = 0
    constructor: _Constructor = field(default_factory=_Constructor)

    def plain(self, node: yaml.Node) -> Any:
        """The node as a Python value."""
        try:
            return self.constructor.construct_document(node)
        except yaml.MarkedYAMLError as exc:
            line = exc.problem_mark.line + 1 if exc.problem_mark else _line(node)
            raise _Invalid(line, str(exc.problem or exc)) from None

    def span(self, node: yaml.Node) -> str:
        """The text the node was read from."""
        start, end = node.start_mark, node.end_mark
        if start is None or end is None:
            return str(node.value)
        return self.source.restore(self.source.text[start.index : end.index])

    def declare(self, step_id: str, line: int) -> None:
        if self.handler_depth:
            raise _Invalid(line, f"a step inside on-error may not have an id ({step_id!r})")
        if step_id.lower() in RESERVED_IDS:
            reserved = ", ".join(sorted(RESERVED_IDS))
            raise _Invalid(line, f"id {step_id!r} is reserved ({reserved})")
        if step_id in self.ids:
            raise _Invalid(line, f"duplicate id {step_id!r} (first on line {self.ids[step_id]})")
        self.ids[step_id] = line

    def jump(self, target: str, line: int, what: str) -> None:
        """Record a jump target; literal ones are checked once every id is known."""
        if "${" not in target:
            self.targets.append((target, line, what))

    def check_targets(self) -> None:
        for target, line, what in self.targets:
            if target not in self.ids and target not in _JUMP_WORDS:
                known = ", ".join([*sorted(self.ids), *_JUMP_WORDS])
                raise _Invalid(line, f"{what} {target!r} is not a step id (known: {known})")


_JUMP_WORDS = ("start", "end", "exit", "last", "default")


def _entries(node: yaml.MappingNode, context: _Context) -> Iterator[tuple[str, int, yaml.Node]]:
    """(key, key line, value) of a mapping, merge keys (`<<`) applied."""
    context.constructor.flatten_mapping(node)
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise _Invalid(_line(key), "keys must be plain words")
        yield str(key.value), _line(key), value


def _text(node: yaml.Node, what: str) -> str | None:
    """A scalar's text as written (`yes` stays `yes`); None for null."""
    if isinstance(node, yaml.ScalarNode):
        return None if node.tag == _NULL else str(node.value)
    kind = "a list" if isinstance(node, yaml.SequenceNode) else "a map"
    raise _Invalid(_line(node), f"{what} must be text, not {kind}")


def _word(node: yaml.Node, what: str, allowed: Mapping[str, str]) -> str:
    """One of a fixed set of words, case and spacing normalised."""
    text = _text(node, what)
    key = " ".join((text or "").lower().split())
    if key not in allowed:
        choices = " | ".join(dict.fromkeys(allowed))
        raise _Invalid(_line(node), f"{what} must be one of {choices} (got {text!r})")
    return allowed[key]


def _timedelta(node: yaml.Node, what: str) -> timedelta | None:
    text = _text(node, what)
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise _Invalid(_line(node), f"{what}: {exc}") from None


def _check_duration(text: str, line: int, what: str) -> None:
    """A literal duration must parse; one with `${…}` is resolved at run time."""
    if "${" in text:
        return
    try:
        parse_duration(text)
    except ValueError as exc:
        raise _Invalid(line, f"{what}: {exc}") from None


def _flag(node: yaml.Node, what: str) -> bool:
    return _word(node, what, _BOOLEANS) == "true"


def _same(*words: str) -> dict[str, str]:
    """Words accepted as themselves (for `_word`)."""
    return {word: word for word in words}


# YAML 1.1's spellings of true and false, which YAML itself also accepts.
_BOOLEANS = {**_same("true", "false"), "yes": "true", "on": "true", "no": "false", "off": "false"}


# -- values read off nodes -------------------------------------------------------------

_WORKFLOW_REPLAYABLE = _same("enabled", "disabled", "from start", "automatically")
_STEP_REPLAYABLE = _same("from here", "from here only", "reset")
_NESTED_REPLAYABLE = {**_STEP_REPLAYABLE, **_WORKFLOW_REPLAYABLE}


def _mapping(node: yaml.Node, context: _Context, what: str) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode) and node.tag == _NULL:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise _Invalid(_line(node), f"{what} must be a map")
    value = context.plain(node)
    assert isinstance(value, dict)
    return value


def _lock(node: yaml.Node, context: _Context) -> Any:
    """`lock: NAME` or `lock: {name, scope}`."""
    if isinstance(node, yaml.MappingNode):
        keys = {key: line for key, line, _ in _entries(node, context)}
        for key, line in keys.items():
            if key not in ("name", "scope"):
                raise _Invalid(line, f"unknown lock key {key!r} (known: name, scope)")
        if "name" not in keys:
            raise _Invalid(_line(node), "a lock map needs `name`")
        return context.plain(node)
    name = (_text(node, "lock") or "").strip()
    if not name:
        raise _Invalid(_line(node), "`lock` needs a name")
    return name


def _retention(node: yaml.Node) -> str:
    text = (_text(node, "retention") or "").strip()
    if not text:
        raise _Invalid(_line(node), "`retention` must not be empty")
    if "${" not in text:  # with an expression (a `hash ${…}`), checked when it runs
        try:
            retention.parse(text)
        except retention.RetentionError as exc:
            raise _Invalid(_line(node), str(exc)) from None
    return text


# -- a step type's own fields ----------------------------------------------------------


# Reads the words after a shorthand's type into nodes by name (`shorthand._template`).
_Reader = Callable[[str, int], dict[str, yaml.Node]]


class _Given:
    """A step's own fields, from its shorthand and its long-form keys."""

    def __init__(
        self,
        kind: str,
        line: int,
        nodes: dict[str, yaml.Node],
        said: frozenset[str],
        context: _Context,
        parse_steps: Callable[[yaml.Node, _Context], tuple[Step, ...]],
    ) -> None:
        self.kind, self.line, self.nodes, self.said, self.context = kind, line, nodes, said, context
        # `stepparse._step_list`, handed in: it reads nested steps through the
        # table of step types, which is above this module.
        self.parse_steps = parse_steps

    def has(self, name: str) -> bool:
        return name in self.nodes

    def line_of(self, name: str) -> int:
        return _line(self.nodes[name]) if name in self.nodes else self.line

    def text(self, name: str) -> str | None:
        return _text(self.nodes[name], f"{self.kind} {name}") if name in self.nodes else None

    def required(self, name: str, reason: str) -> str:
        text = self.text(name)
        if text is None or not text.strip():
            raise _Invalid(self.line_of(name), reason)
        return text.strip()

    def value(self, name: str, default: Any = None) -> Any:
        return self.context.plain(self.nodes[name]) if name in self.nodes else default

    def duration(self, name: str) -> str | None:
        text = self.text(name)
        if text is not None:
            _check_duration(text, self.line_of(name), f"{self.kind} {name}")
        return text

    def flag(self, name: str) -> bool:
        return name in self.nodes and _flag(self.nodes[name], f"{self.kind} {name}")

    def steps(self, name: str, reason: str) -> tuple[Step, ...]:
        steps = self.parse_steps(self.nodes[name], self.context) if name in self.nodes else ()
        if not steps:
            raise _Invalid(self.line_of(name), reason)
        return steps

    def error(self, name: str, reason: str) -> _Invalid:
        return _Invalid(self.line_of(name), reason)


def _keys(*names: str, **aliases: str) -> dict[str, str]:
    """Long-form keys: each name is read as itself; an alias is read as the
    name it maps to."""
    return {**{name: name for name in names}, **aliases}
