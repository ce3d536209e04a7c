"""Step-workflow definitions: YAML text -> `model.Definition`, checked.

`parse` reads and checks a whole definition; every problem is a
`DefinitionError` whose message is `FILE:LINE: reason`, naming the line of the
key or step at fault. The language is STEPS.md; behaviour it does not spell out
follows Apache Brooklyn (reference brooklyn-dsl.md §1, §2, §4, §6, §11).

Reading the YAML
----------------
`${…}` is kept as text even inside YAML flow collections: `input: {owner:
${input.owner}}` (as in STEPS.md) would otherwise be a YAML error, the braces
being taken for a mapping. Values stay as written (the interpreter resolves
them when the step runs); timestamps stay text so every value survives the
history's JSON. Duplicate keys are errors rather than silently dropped.

Steps
-----
A step is a string (shorthand: the first word is the type, the rest follows
the type's template), a map with `step:` (or `s:` / `shorthand:`) or `type:`
plus keys, a map with `steps:` and no type (a `subworkflow`), or a list (an
inline `subworkflow`). A map with a single key containing a space is YAML
having split `- log Your name is: ${name}` at `: `; it is read back as the
shorthand `log Your name is: ${name}`. A map's keys are the common keys, the
type's own long-form keys (below, into `Step.args`), and anything else, which
becomes an entry of `Step.input` (Brooklyn's rule). A key the shorthand also
sets is an error. Shorthand words may be quoted; a final multi-word part keeps
its quotes unless it is one quoted string (then unwrapped), except `let`'s
value, which is an expression and is kept exactly.

Common keys: `id`, `name`, `condition`, `input`, `output`, `next`,
`on-error`, `timeout`, `idempotent` (`yes`/`no`/`default`), `replayable`.
Some types take a common key as their own:

| type    | key         | goes to                                            |
| ------- | ----------- | -------------------------------------------------- |
| `if`    | `condition` | `args["test"]` (the branch test; `Step.condition` stays None) |
| `retry` | `timeout`   | `args["timeout"]` (time since the oldest retry, §7) |
| `wait`  | `timeout`   | `args["timeout"]` (how long to wait for the signal) |
| `goto`  | `next`      | `args["target"]`                                   |
| `signal`| (`name` stays the display name; the signal's name is the key `signal`) | |

`args` of each type: its shorthand, then the keys of `args` (long-form keys
that differ in brackets; every arg may also be given as a key of its name).

- `let [TYPE] NAME = EXPR`: `var_type`, `name`, `value`, `expression`
  [`variable`: NAME or {name, type}]. The shorthand's value is an expression;
  a long-form value is one when it is text.
- `transform [TYPE] NAME = VALUE | op | op`, `transform value VALUE | op…`,
  `transform variable NAME | op…`: `var_type`, `name`, `value`, `ops`
  [`variable`; `transform`: "op | op" or a list].
- `log MESSAGE`: `message`, `level` (debug, info, warning, error).
- `sleep DURATION`: `duration`.
- `wait signal NAME [timeout DURATION]`: `signal`, `timeout`.
- `goto ID`: `target` [`next`].
- `label ID`: none; sets `Step.id`.
- `no-op`: none.
- `return VALUE`: `value`.
- `fail [rethrow] [message TEXT]`: `rethrow`, `message`, `value`.
- `retry [replay] [from ID] [limit L] [backoff B] [timeout D] [hash KEY]`:
  `replay` (True/False/"force"/None), `from` [`next`], `limit` (tuple),
  `backoff` (text or map), `timeout`, `hash`.
- `if ${EXPR} [== VALUE] [then STEP]`: `test`, `then` [`step`, `steps`],
  `else`.
- `switch VALUE`: `value`, `cases`.
- `foreach VAR in EXPR [do STEP]`: `var` [`target_var_name`], `items`
  [`target`], `do` [`steps`], `concurrency`, `reducing`, `index_var`
  [`target_index_var_name`].
- `workflow replayable V` / `workflow retention V`, or `steps:`: `steps`,
  `target`, `has_target`, `concurrency`, `reducing`, `lock`, `replayable`,
  `retention`, `setting`, `var` [`target_var_name`], `index_var`.
- `subworkflow` (a list, or `steps:` without a type): `steps`.
- `activity TYPE`: `activity_type`, `version`, `task_list` [`task-list`],
  `schedule_to_start`, `start_to_close`, `schedule_to_close`, `heartbeat`
  (each also with a `_timeout` suffix).
- `http URL`: `url` [`endpoint`], `task_list`.
- `shell COMMAND`: `command`, `task_list`.
- `signal WORKFLOW_ID NAME [= VALUE]`: `workflow_id`, `name` [`signal`],
  `value`.
- `child TYPE`: `workflow_type`, `version`, `task_list`.

`hash` in the `retry` shorthand is a Weft addition (Brooklyn has it in the
long form only). `workflow replayable …` / `workflow retention …` change the
running workflow's settings: `args["setting"]` names which, and such a step
has no steps.

Checks: ids are unique across the whole definition (nested steps included),
are not reserved words (any case), and steps inside `on-error` have none; a
literal `next`, `goto` or `retry from` names an id or `start`, `end`, `exit`,
`last`, `default`; literal durations parse; `if EXPR` needs a `${…}` (a literal
is always true); every switch case but the last has a condition; `reducing`
needs concurrency 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from sdk import retention
from sdk.durations import parse_duration
from workers.steps import retrying, yamlbound
from workers.steps.continuation import parse_after
from workers.steps.errors import StepInterpreterError
from workers.steps.expressions import check_expression
from workers.steps.limits import MAX_EXPRESSION_CHARS
from workers.steps.model import RESERVED_IDS, Definition, Param, Step

__all__ = ["DefinitionError", "load_dir", "load_file", "parse"]


class DefinitionError(StepInterpreterError, ValueError):
    """A definition does not parse or validate: `FILE:LINE: reason`."""


def parse(text: str, path: str = "<definition>") -> Definition:
    """Parse and check a whole definition."""
    try:
        root, source = _compose(text)
        if not isinstance(root, yaml.MappingNode):
            line = _line(root) if root is not None else 1
            raise _Invalid(line, "a workflow definition is a mapping (name: …)")
        context = _Context(source)
        definition = _definition(root, context)
        context.check_targets()
    except _Invalid as exc:
        raise DefinitionError(f"{path}:{exc.line}: {exc.reason}") from None
    except RecursionError:  # a YAML alias that contains itself, or absurd nesting
        raise DefinitionError(f"{path}:1: the definition nests too deeply") from None
    return replace(definition, source=text, path=path)


def load_file(path: Path) -> Definition:
    """Read a definition file (UTF-8) and parse it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DefinitionError(f"{path}:{line}: not UTF-8 text") from None
    return parse(text, str(path))


def load_dir(directory: Path) -> list[Definition]:
    """Every `*.yaml` / `*.yml` file of a folder, in name order; one
    `(name, version)` defined twice is an error."""
    try:
        files = sorted(
            p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
        )
    except OSError as exc:
        raise DefinitionError(f"{directory}: cannot read: {exc.strerror or exc}") from None
    found: list[Definition] = []
    seen: dict[tuple[str, str], str] = {}
    for path in files:
        definition = load_file(path)
        key = (definition.name, definition.version)
        if key in seen:
            raise DefinitionError(
                f"{path}: workflow {definition.name} version {definition.version} "
                f"is also defined in {seen[key]}"
            )
        seen[key] = str(path)
        found.append(definition)
    return found


# --- reading YAML -----------------------------------------------------------------------


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


# --- the workflow ----------------------------------------------------------------------

_WORKFLOW_KEYS = {
    "name": "name",
    "version": "version",
    "task_list": "task_list",
    "task-list": "task_list",
    "description": "description",
    "parameters": "parameters",
    "input": "input",
    "output": "output",
    "on-error": "on_error",
    "timeout": "timeout",
    "execution-timeout": "execution_timeout",
    "execution_timeout": "execution_timeout",
    "decider-timeout": "decider_timeout",
    "decider_timeout": "decider_timeout",
    "lock": "lock",
    "replayable": "replayable",
    "idempotent": "idempotent",
    "retention": "retention",
    "continue-as-new-after": "continue_as_new_after",
    "continue_as_new_after": "continue_as_new_after",
    "steps": "steps",
}
_WORKFLOW_REPLAYABLE = _same("enabled", "disabled", "from start", "automatically")
_WORKFLOW_IDEMPOTENT = {"all": "all", "none": ""}


def _definition(root: yaml.MappingNode, context: _Context) -> Definition:
    # Keys are read in the order written, so the first problem in the file is
    # the one reported; what is missing is reported after.
    values: dict[str, Any] = {"version": "1"}
    given: dict[str, str] = {}
    for key, line, node in _entries(root, context):
        name = _WORKFLOW_KEYS.get(key)
        if name is None:
            known = ", ".join(sorted(_WORKFLOW_KEYS))
            raise _Invalid(line, f"unknown key {key!r} (known: {known})")
        if name in given:
            raise _Invalid(line, f"{key!r} is given twice (also as {given[name]!r})")
        given[name] = key
        values.update(_WORKFLOW_READERS[name](node, context, key))
    if not values.get("name"):
        raise _Invalid(1, "`name` is required")
    if "steps" not in values:
        raise _Invalid(1, "`steps` is required (a list of steps)")
    return Definition(**values)


def _read_name(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    name = (_text(node, "name") or "").strip()
    if not name:
        raise _Invalid(_line(node), "`name` must not be empty")
    return {"name": name}


def _read_version(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    # A number is taken as written (`1.10` stays "1.10"); absent or null is "1".
    version = _text(node, "version")
    if version is None:
        return {}
    if not version.strip():
        raise _Invalid(_line(node), "`version` must not be empty")
    return {"version": version.strip()}


def _read_text(name: str) -> Callable[[yaml.Node, _Context, str], dict[str, Any]]:
    def read(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
        text = _text(node, key)
        return {} if text is None else {name: text}

    return read


def _read_span(name: str) -> Callable[[yaml.Node, _Context, str], dict[str, Any]]:
    def read(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
        return {name: _timedelta(node, key)}

    return read


def _read_input(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    return {"input": _mapping(node, context, key)}


def _read_output(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    return {"output": context.plain(node), "has_output": True}


def _read_on_error(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    return {"on_error": _handlers(node, context)}


def _read_lock(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    return {"lock": _lock(node, context)}


def _read_replayable(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    return {"replayable": _word(node, "replayable", _WORKFLOW_REPLAYABLE)}


def _read_idempotent(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    if _text(node, "idempotent") in (None, ""):
        return {}
    return {"idempotent": _word(node, "idempotent", _WORKFLOW_IDEMPOTENT)}


def _read_retention(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    return {"retention": _retention(node)}


def _read_continue_after(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    text = _text(node, key)
    if text is None:
        return {}
    try:
        return {"continue_as_new_after": parse_after(text)}
    except ValueError as exc:
        raise _Invalid(_line(node), f"`{key}`: {exc}") from None


def _read_parameters(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode) and node.tag == _NULL:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise _Invalid(_line(node), "parameters must be a map of name: {type, default, …}")
    params = tuple(_parameter(name, value, context) for name, _, value in _entries(node, context))
    return {"parameters": params}


def _read_steps(node: yaml.Node, context: _Context, key: str) -> dict[str, Any]:
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise _Invalid(_line(node), "`steps` must be a non-empty list of steps")
    return {"steps": _step_list(node, context)}


_WORKFLOW_READERS: dict[str, Callable[[yaml.Node, _Context, str], dict[str, Any]]] = {
    "name": _read_name,
    "version": _read_version,
    "task_list": _read_text("task_list"),
    "description": _read_text("description"),
    "parameters": _read_parameters,
    "input": _read_input,
    "output": _read_output,
    "on_error": _read_on_error,
    "timeout": _read_span("timeout"),
    "execution_timeout": _read_span("execution_timeout"),
    "decider_timeout": _read_span("decider_timeout"),
    "lock": _read_lock,
    "replayable": _read_replayable,
    "idempotent": _read_idempotent,
    "retention": _read_retention,
    "continue_as_new_after": _read_continue_after,
    "steps": _read_steps,
}


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


# --- parameters ---------------------------------------------------------------------------

_PARAM_TYPES = ("string", "integer", "double", "boolean", "map", "list", "json", "yaml")
_PARAM_KEYS = ("type", "default", "required", "description")
_INTEGER = re.compile(r"[+-]?\d+")


def _parameter(name: str, node: yaml.Node, context: _Context) -> Param:
    """`name: {type, default, required, description}`, or `name: DEFAULT`."""
    if not isinstance(node, yaml.MappingNode):
        if isinstance(node, yaml.ScalarNode) and node.tag == _NULL:
            return Param(name)
        return Param(name, default=context.plain(node), has_default=True)
    spec = {key: (key_line, value) for key, key_line, value in _entries(node, context)}
    for key, (key_line, _) in spec.items():
        if key not in _PARAM_KEYS:
            raise _Invalid(
                key_line,
                f"parameter {name!r}: unknown key {key!r} (known: {', '.join(_PARAM_KEYS)};"
                " a map default goes under `default:`)",
            )
    kind = ""
    if "type" in spec:
        kind = _word(spec["type"][1], f"parameter {name!r} type", _same(*_PARAM_TYPES))
    if "description" in spec:
        _text(spec["description"][1], f"parameter {name!r} description")
    required = "required" in spec and _flag(spec["required"][1], f"parameter {name!r} required")
    if "default" not in spec:
        return Param(name, type=kind, required=required)
    default_node = spec["default"][1]
    default = context.plain(default_node)
    if not _fits(kind, default):
        raise _Invalid(
            _line(default_node), f"parameter {name!r}: default {default!r} is not of type {kind}"
        )
    return Param(name, type=kind, default=default, has_default=True, required=required)


def _fits(kind: str, value: Any) -> bool:
    """Whether a default can be the parameter's type (text the interpreter
    would coerce counts: `default: "3"` fits `integer`)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if value is None or kind in ("", "json", "yaml"):
        return True
    if kind == "string":
        return isinstance(value, str) or number
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and _INTEGER.fullmatch(value.strip()) is not None
        )
    if kind == "double":
        return number or (isinstance(value, str) and _is_float(value))
    if kind == "boolean":
        return isinstance(value, bool) or (
            isinstance(value, str) and value.strip().lower() in ("true", "false")
        )
    return isinstance(value, dict if kind == "map" else list)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- steps --------------------------------------------------------------------------------

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
_STEP_REPLAYABLE = _same("from here", "from here only", "reset")
_NESTED_REPLAYABLE = {**_STEP_REPLAYABLE, **_WORKFLOW_REPLAYABLE}


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
        spec = _TYPES.get(kind)
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
    spec = _TYPES.get(head.kind)
    if spec is None:
        known = ", ".join(sorted(_TYPES))
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
    args = spec.build(_Given(head.kind, line, given, frozenset(said), context))
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
    entries: Sequence[tuple[str, int, yaml.Node]], spec: _Type
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


# --- shorthand templates (reference §2) -----------------------------------------------------


@dataclass(frozen=True)
class _Token:
    text: str  # quotes removed when the token is one quoted string
    start: int
    end: int
    quoted: bool


def _tokens(text: str) -> list[_Token]:
    """Words separated by spaces; a quoted string is one word, and so is a
    `{…}` group (`${a b}`, `{a, b}`)."""
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        start = pos
        close = _closing_quote(text, pos) if text[pos] in "\"'" else None
        if close is not None and (close + 1 == len(text) or text[close + 1].isspace()):
            tokens.append(_Token(_unquote(text[start : close + 1]), start, close + 1, True))
            pos = close + 1
            continue
        pos = _word_end(text, close + 1 if close is not None else pos)
        tokens.append(_Token(text[start:pos], start, pos, False))
    return tokens


def _closing_quote(text: str, start: int) -> int | None:
    quote, pos = text[start], start + 1
    while pos < len(text):
        if text[pos] == "\\" and quote == '"':
            pos += 2
            continue
        if text[pos] == quote:
            return pos
        pos += 1
    return None


def _word_end(text: str, pos: int) -> int:
    depth = 0
    while pos < len(text) and (depth or not text[pos].isspace()):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}" and depth:
            depth -= 1
        pos += 1
    return pos


def _unquote(text: str) -> str:
    inner = text[1:-1]
    if text[0] == '"':
        return re.sub(r"\\(.)", r"\1", inner)
    return inner


@dataclass(frozen=True)
class _Literal:
    word: str


@dataclass(frozen=True)
class _Var:
    name: str
    many: bool


@dataclass(frozen=True)
class _Group:
    parts: tuple[_Part, ...]
    flag: str | None


@dataclass(frozen=True)
class _Flag:
    name: str


_Part = _Literal | _Var | _Group | _Flag
_Spans = dict[str, tuple[int, int] | bool]


def _compile(template: str) -> tuple[_Part, ...]:
    """Brooklyn's template grammar: `${X}` a word, `${X...}` one or more
    words, other words literal, `[ … ]` optional, `[ ?${F} … ]` optional and
    sets F when present."""
    stack: list[list[_Part]] = [[]]
    flags: list[str | None] = []
    for word in template.split():
        if word == "[":
            stack.append([])
            flags.append(None)
        elif word == "]":
            parts = tuple(stack.pop())
            stack[-1].append(_Group(parts, flags.pop()))
        elif word.startswith("?${"):
            flags[-1] = word[3:-1]
        elif word.startswith("${"):
            name = word[2:-1]
            stack[-1].append(_Var(name.removesuffix("..."), name.endswith("...")))
        else:
            stack[-1].append(_Literal(word))
    return tuple(stack[0])


def _match(parts: tuple[_Part, ...], tokens: Sequence[_Token], pos: int) -> _Spans | None:
    """The first way the parts cover every token: optional groups are tried
    with then without, and a `...` variable takes as few words as let the rest
    match (so it stops at the next keyword)."""
    if not parts:
        return {} if pos == len(tokens) else None
    head, rest = parts[0], parts[1:]
    if isinstance(head, _Literal):
        if pos < len(tokens) and not tokens[pos].quoted and tokens[pos].text == head.word:
            return _match(rest, tokens, pos + 1)
        return None
    if isinstance(head, _Flag):
        found = _match(rest, tokens, pos)
        if found is not None:
            found[head.name] = True
        return found
    if isinstance(head, _Var):
        last = len(tokens) if head.many else min(pos + 1, len(tokens))
        for end in range(pos + 1, last + 1):
            found = _match(rest, tokens, end)
            if found is not None:
                found[head.name] = (pos, end)
                return found
        return None
    inner = head.parts + ((_Flag(head.flag),) if head.flag else ())
    found = _match(inner + rest, tokens, pos)
    return found if found is not None else _match(rest, tokens, pos)


_Reader = Callable[[str, int], dict[str, yaml.Node]]


def _template(template: str, usage: str, raw: frozenset[str] = frozenset()) -> _Reader:
    """A shorthand reader: the words after the type -> nodes by name. Names in
    `raw` keep their text exactly (quotes included)."""
    parts = _compile(template)

    def read(text: str, line: int) -> dict[str, yaml.Node]:
        tokens = _tokens(text)
        spans = _match(parts, tokens, 0)
        if spans is None:
            raise _Invalid(line, f"cannot read {text!r}: use `{usage}`")
        return {
            name: _synthetic(
                span if isinstance(span, bool) else _captured(text, tokens, span, name in raw),
                line,
            )
            for name, span in spans.items()
        }

    return read


def _captured(text: str, tokens: Sequence[_Token], span: tuple[int, int], raw: bool) -> str:
    start, end = span
    if end - start == 1 and not raw:
        return tokens[start].text
    return text[tokens[start].start : tokens[end - 1].end]


# --- step types ---------------------------------------------------------------------------


class _Given:
    """A step's own fields, from its shorthand and its long-form keys."""

    def __init__(
        self,
        kind: str,
        line: int,
        nodes: dict[str, yaml.Node],
        said: frozenset[str],
        context: _Context,
    ) -> None:
        self.kind, self.line, self.nodes, self.said, self.context = kind, line, nodes, said, context

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
        steps = _step_list(self.nodes[name], self.context) if name in self.nodes else ()
        if not steps:
            raise _Invalid(self.line_of(name), reason)
        return steps

    def error(self, name: str, reason: str) -> _Invalid:
        return _Invalid(self.line_of(name), reason)


@dataclass(frozen=True)
class _Type:
    shorthand: _Reader
    keys: Mapping[str, str]  # long-form key -> the name the builder reads
    build: Callable[[_Given], dict[str, Any]]


_VAR_TYPES = ("integer", "double", "string", "boolean", "map", "list", "json", "yaml")
_NAME = re.compile(r"[A-Za-z_][\w-]*(\.[\w-]+)*")
_LOG_LEVELS = ("debug", "info", "warning", "error")


def _variable(given: _Given) -> tuple[str | None, str | None]:
    """(type, name) from `variable:` (NAME or {name, type}) and the shorthand."""
    var_type = given.text("var_type")
    name: str | None = None
    if given.has("variable"):
        node = given.nodes["variable"]
        if isinstance(node, yaml.MappingNode):
            spec = {key: value for key, _, value in _entries(node, given.context)}
            name = _text(spec["name"], "variable name") if "name" in spec else None
            if "type" in spec:
                var_type = _text(spec["type"], "variable type")
        else:
            name = given.text("variable")
    if var_type is not None and var_type not in _VAR_TYPES:
        raise given.error(
            "var_type",
            f"unknown type {var_type!r} for {given.kind} (known: {', '.join(_VAR_TYPES)})",
        )
    if name is not None and not _NAME.fullmatch(name.strip()):
        raise given.error("variable", f"bad variable name {name!r}")
    return var_type, name.strip() if name is not None else None


def _let(given: _Given) -> dict[str, Any]:
    var_type, name = _variable(given)
    if name is None or not given.has("value"):
        raise _Invalid(given.line, "let needs `NAME = VALUE` (long form: `variable:` and `value:`)")
    value = given.value("value")
    # The shorthand's value is always an expression; a long-form value only
    # when it is text (a map or a number is a value as written).
    expression = "value" in given.said or isinstance(value, str)
    if expression and isinstance(value, str):
        # Only the bounds here: other mistakes are the step's ExpressionError,
        # which its on-error may handle.
        problem = check_expression(value)
        if problem:
            raise given.error("value", f"let {name}: {problem}")
    return {"var_type": var_type, "name": name, "value": value, "expression": expression}


def _transform_shorthand(text: str, line: int) -> dict[str, yaml.Node]:
    tokens = _tokens(text)
    pipe = next((t for t in tokens if t.text == "|" and not t.quoted), None)
    if pipe is None:
        raise _Invalid(line, f"cannot read {text!r}: use `{_TRANSFORM_USAGE}`")
    head = text[: pipe.start].strip()
    for reader in _TRANSFORM_HEADS:
        try:
            found = reader(head, line)
        except _Invalid:
            continue
        return {**found, "ops": _synthetic(text[pipe.end :].strip(), line)}
    raise _Invalid(line, f"cannot read {text!r}: use `{_TRANSFORM_USAGE}`")


_TRANSFORM_USAGE = "transform [TYPE] NAME = VALUE | op | op` (or `value V | …`, `variable NAME | …"
_TRANSFORM_HEADS = (
    _template("[ ${var_type} ] variable ${variable}", _TRANSFORM_USAGE),
    _template("[ ${var_type} ] value ${value...}", _TRANSFORM_USAGE),
    _template("[ ${var_type} ] ${variable} = ${value...}", _TRANSFORM_USAGE),
)


def _transform(given: _Given) -> dict[str, Any]:
    var_type, name = _variable(given)
    if name is None and not given.has("value"):
        raise _Invalid(given.line, "transform needs a variable or a value")
    value = given.value("value") if given.has("value") else f"${{{name}}}"
    ops = _ops(given)
    return {"var_type": var_type, "name": name, "value": value, "ops": ops}


def _ops(given: _Given) -> tuple[str, ...]:
    node = given.nodes.get("ops")
    if isinstance(node, yaml.SequenceNode):
        ops = [(_text(item, "transform") or "").strip() for item in node.value]
    else:
        text = given.text("ops") or ""
        cuts = [t for t in _tokens(text) if t.text == "|" and not t.quoted]
        edges = [0, *(p for t in cuts for p in (t.start, t.end)), len(text)]
        ops = [text[edges[i] : edges[i + 1]].strip() for i in range(0, len(edges), 2)]
    if not ops or any(not op for op in ops):
        raise given.error("ops", "transform needs operations: `VALUE | op | op`, none empty")
    for op in ops:
        if len(op) > MAX_EXPRESSION_CHARS:
            raise given.error(
                "ops",
                f"a transform operation is {len(op)} characters long:"
                f" the limit is {MAX_EXPRESSION_CHARS}",
            )
    return tuple(ops)


def _log(given: _Given) -> dict[str, Any]:
    message = given.text("message")
    if message is None:
        raise _Invalid(given.line, "log needs a message")
    level = given.text("level") or "info"
    if level not in _LOG_LEVELS:
        raise given.error("level", f"log level must be one of {', '.join(_LOG_LEVELS)}")
    return {"message": message, "level": level}


def _sleep(given: _Given) -> dict[str, Any]:
    given.required("duration", "sleep needs a duration: `sleep 5s`")
    return {"duration": given.duration("duration")}


def _wait(given: _Given) -> dict[str, Any]:
    signal = given.required("signal", "wait needs a signal: `wait signal NAME`")
    return {"signal": signal, "timeout": given.duration("timeout")}


def _goto(given: _Given) -> dict[str, Any]:
    target = given.required("target", "goto needs a target: `goto ID`")
    given.context.jump(target, given.line_of("target"), "goto")
    return {"target": target}


def _label(given: _Given) -> dict[str, Any]:
    # `_build` turns this into the step's id.
    return {"label": given.text("label")} if given.has("label") else {}


def _no_args(given: _Given) -> dict[str, Any]:
    return {}


def _return(given: _Given) -> dict[str, Any]:
    return {"value": given.value("value")}


def _fail(given: _Given) -> dict[str, Any]:
    return {
        "rethrow": given.flag("rethrow"),
        "message": given.text("message"),
        "value": given.value("value"),
    }


_REPLAY: dict[str, bool | str] = {
    "true": True,
    "yes": True,
    "false": False,
    "no": False,
    "force": "force",
}


def _retry(given: _Given) -> dict[str, Any]:
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


def _if(given: _Given) -> dict[str, Any]:
    if given.has("target") and given.has("test"):
        raise given.error("test", "if has a shorthand test and `condition`: give one")
    if given.has("target"):
        test = _if_test(given)
    elif given.has("test"):
        test = given.value("test")
    else:
        raise _Invalid(given.line, "if needs a condition: `if ${EXPR} then STEP`")
    then = given.steps("then", "if needs `then` (a step or a list of steps)")
    otherwise = _step_list(given.nodes["else"], given.context) if given.has("else") else ()
    return {"test": test, "then": then, "else": otherwise}


def _if_test(given: _Given) -> dict[str, Any]:
    target = given.required("target", "if needs a condition")
    if "${" not in target:
        raise given.error(
            "target", f"if {target!r} is always true: test a `${{…}}` value, e.g. `if ${{x}}`"
        )
    if given.has("check"):
        return {"target": target, "check": given.text("check"), "assert": {"when": "present"}}
    return {"target": target, "when": "truthy"}


def _switch(given: _Given) -> dict[str, Any]:
    node = given.nodes.get("cases")
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise _Invalid(
            _line(node) if node is not None else given.line, "switch needs cases (a list of steps)"
        )
    cases = _step_list(node, given.context)
    for case in cases[:-1]:
        if case.condition is None:
            raise _Invalid(case.line, "every switch case but the last needs a condition")
    return {"value": given.value("value"), "cases": cases}


def _fan_out(given: _Given) -> dict[str, Any]:
    """`concurrency` and `reducing`, shared by `foreach` and `workflow`."""
    concurrency = given.value("concurrency", 1)
    reducing = given.value("reducing")
    if reducing is not None and not isinstance(reducing, dict):
        raise given.error("reducing", "reducing must be a map of variable: initial value")
    # Each iteration reads the variables the previous one left: one at a time.
    if reducing is not None and str(concurrency).strip() != "1":
        raise given.error("concurrency", "reducing needs concurrency 1")
    return {"concurrency": concurrency, "reducing": reducing}


def _foreach(given: _Given) -> dict[str, Any]:
    var = given.required("var", "foreach needs a variable: `foreach VAR in EXPR`")
    if not given.has("items"):
        raise _Invalid(given.line, "foreach needs items: `foreach VAR in EXPR` or `target:`")
    return {
        "var": var,
        "items": given.value("items"),
        "do": given.steps("do", "foreach needs steps: `do STEP`, `do:` or `steps:`"),
        **_fan_out(given),
        "index_var": (given.text("index_var") or "target_index").strip(),
    }


def _workflow(given: _Given) -> dict[str, Any]:
    if given.said & {"replayable", "retention"}:
        return _workflow_setting(given)
    return {
        "steps": given.steps("steps", "workflow needs steps"),
        "target": given.value("target"),
        "has_target": given.has("target"),
        **_fan_out(given),
        "lock": _lock(given.nodes["lock"], given.context) if given.has("lock") else None,
        "replayable": None,
        "retention": _retention(given.nodes["retention"]) if given.has("retention") else None,
        "setting": None,
        "var": (given.text("var") or "target").strip(),
        "index_var": (given.text("index_var") or "target_index").strip(),
    }


def _workflow_setting(given: _Given) -> dict[str, Any]:
    """`workflow replayable …` / `workflow retention …`: a change to the
    running workflow's settings, with no steps of its own."""
    if given.said >= {"replayable", "retention"}:
        raise _Invalid(given.line, "give `workflow replayable …` and `workflow retention …` apart")
    for key in ("steps", "target", "lock"):
        if given.has(key):
            raise given.error(key, f"a `workflow` setting step takes no `{key}`")
    setting = "replayable" if "replayable" in given.said else "retention"
    replayable = retention = None
    if setting == "replayable":
        replayable = _word(given.nodes["replayable"], "workflow replayable", _NESTED_REPLAYABLE)
    else:
        retention = _retention(given.nodes["retention"])
    return {
        "steps": (),
        "target": None,
        "has_target": False,
        "concurrency": 1,
        "reducing": None,
        "lock": None,
        "replayable": replayable,
        "retention": retention,
        "setting": setting,
        "var": "target",
        "index_var": "target_index",
    }


def _subworkflow(given: _Given) -> dict[str, Any]:
    return {"steps": given.steps("steps", "subworkflow needs steps")}


_ACTIVITY_TIMEOUTS = ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat")


def _activity(given: _Given) -> dict[str, Any]:
    activity_type = given.required("activity_type", "activity needs a type: `activity TYPE`")
    args: dict[str, Any] = {
        "activity_type": activity_type,
        "version": (given.text("version") or "").strip(),
        "task_list": given.text("task_list"),
    }
    for name in _ACTIVITY_TIMEOUTS:
        args[name] = given.duration(name)
    return args


def _http(given: _Given) -> dict[str, Any]:
    url = given.required("url", "http needs a url: `http URL`")
    return {"url": url, "task_list": given.text("task_list")}


def _shell(given: _Given) -> dict[str, Any]:
    command = given.required("command", "shell needs a command: `shell COMMAND`")
    return {"command": command, "task_list": given.text("task_list")}


def _signal(given: _Given) -> dict[str, Any]:
    reason = "signal needs a workflow id and a name: `signal WORKFLOW_ID NAME [= VALUE]`"
    return {
        "workflow_id": given.required("workflow_id", reason),
        "name": given.required("name", reason),
        "value": given.value("value"),
    }


def _child(given: _Given) -> dict[str, Any]:
    workflow_type = given.required("workflow_type", "child needs a workflow type: `child TYPE`")
    return {
        "workflow_type": workflow_type,
        "version": (given.text("version") or "").strip(),
        "task_list": given.text("task_list"),
    }


def _keys(*names: str, **aliases: str) -> dict[str, str]:
    """Long-form keys: each name is read as itself; an alias is read as the
    name it maps to."""
    return {**{name: name for name in names}, **aliases}


_TASK_LIST = {"task_list": "task_list", "task-list": "task_list"}
_FAN_OUT = _keys(
    "concurrency",
    "reducing",
    target_var_name="var",
    target_index_var_name="index_var",
)

_TYPES: dict[str, _Type] = {
    "let": _Type(
        _template(
            "[ ${var_type} ] ${variable} = ${value...}",
            "let [TYPE] NAME = VALUE",
            raw=frozenset({"value"}),
        ),
        _keys("variable", "value"),
        _let,
    ),
    "transform": _Type(
        _transform_shorthand, _keys("variable", "value", transform="ops"), _transform
    ),
    "log": _Type(_template("${message...}", "log MESSAGE"), _keys("message", "level"), _log),
    "sleep": _Type(_template("${duration}", "sleep DURATION"), _keys("duration"), _sleep),
    "wait": _Type(
        _template("signal ${signal} [ timeout ${timeout} ]", "wait signal NAME [timeout DURATION]"),
        _keys("signal", "timeout"),
        _wait,
    ),
    "goto": _Type(_template("${target}", "goto ID"), _keys("target", next="target"), _goto),
    "label": _Type(_template("${label}", "label ID"), {}, _label),
    "no-op": _Type(_template("", "no-op"), {}, _no_args),
    "return": _Type(_template("[ ${value...} ]", "return VALUE"), _keys("value"), _return),
    "fail": _Type(
        _template(
            "[ ?${rethrow} rethrow ] [ message ${message...} ]", "fail [rethrow] [message TEXT]"
        ),
        _keys("rethrow", "message", "value"),
        _fail,
    ),
    "retry": _Type(
        _template(
            "[ ?${replay} replay ] [ from ${from} ] [ limit ${limit...} ]"
            " [ backoff ${backoff...} ] [ timeout ${timeout} ] [ hash ${hash} ]",
            "retry [replay] [from ID] [limit L] [backoff B] [timeout D] [hash KEY]",
        ),
        _keys("replay", "limit", "backoff", "timeout", "hash", next="from"),
        _retry,
    ),
    "if": _Type(
        _template(
            "${target} [ == ${check...} ] [ then ${then...} ]", "if ${EXPR} [== VALUE] then STEP"
        ),
        _keys("then", "else", condition="test", step="then", steps="then"),
        _if,
    ),
    "switch": _Type(_template("[ ${value...} ]", "switch VALUE"), _keys("value", "cases"), _switch),
    "foreach": _Type(
        _template("${var} [ in ${items...} [ do ${do...} ] ]", "foreach VAR in EXPR [do STEP]"),
        {**_FAN_OUT, "target": "items", "do": "do", "steps": "do"},
        _foreach,
    ),
    "workflow": _Type(
        _template(
            "[ replayable ${replayable...} ] [ retention ${retention...} ]",
            "workflow replayable VALUE` or `workflow retention VALUE",
        ),
        {**_FAN_OUT, **_keys("steps", "target", "lock", "retention")},
        _workflow,
    ),
    "subworkflow": _Type(_template("", "subworkflow"), _keys("steps"), _subworkflow),
    "activity": _Type(
        _template("${activity_type}", "activity TYPE"),
        {
            **_keys("activity_type", "version", *_ACTIVITY_TIMEOUTS),
            **{f"{name}_timeout": name for name in _ACTIVITY_TIMEOUTS},
            **_TASK_LIST,
        },
        _activity,
    ),
    "http": _Type(
        _template("${url}", "http URL"), {**_keys("url", endpoint="url"), **_TASK_LIST}, _http
    ),
    "shell": _Type(
        _template("${command...}", "shell COMMAND"), {**_keys("command"), **_TASK_LIST}, _shell
    ),
    "signal": _Type(
        _template("${workflow_id} ${name} [ = ${value...} ]", "signal WORKFLOW_ID NAME [= VALUE]"),
        _keys("workflow_id", "value", signal="name"),
        _signal,
    ),
    "child": _Type(
        _template("${workflow_type}", "child TYPE"),
        {**_keys("workflow_type", "version"), **_TASK_LIST},
        _child,
    ),
}
