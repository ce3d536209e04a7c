"""Step-workflow definitions: YAML text -> `model.Definition`, checked.

`parse` reads and checks a whole definition; every problem is a
`DefinitionError` whose message is `FILE:LINE: reason`, naming the line of the
key or step at fault. The language is STEPS.md; behaviour it does not spell out
follows Apache Brooklyn (reference brooklyn-dsl.md §1, §2, §4, §6, §11).

Where each part is read: the YAML and plain values in `syntax`, one step in
`stepparse`, shorthand templates in `shorthand`, and each type's own fields in
`steptypes` (next to the type's body); the workflow's keys and its parameters
here.

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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from workers.steps.continuation import parse_after
from workers.steps.errors import StepInterpreterError
from workers.steps.model import DEFAULT_VERSION, MAX_DEFINITION_BYTES, Definition, Param
from workers.steps.stepparse import _handlers, _step_list
from workers.steps.syntax import (
    _NULL,
    _WORKFLOW_REPLAYABLE,
    _compose,
    _Context,
    _entries,
    _flag,
    _Invalid,
    _line,
    _lock,
    _mapping,
    _retention,
    _same,
    _text,
    _timedelta,
    _word,
)

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


def load_file(path: Path, max_bytes: int = MAX_DEFINITION_BYTES) -> Definition:
    """Read a definition file (UTF-8) and parse it; a file longer than
    `max_bytes` is refused before more of it is read (`/dev/zero`)."""
    try:
        with path.open("rb") as file:
            raw = file.read(max_bytes + 1)
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise DefinitionError(
            f"{path}: the definition is more than {max_bytes} bytes: the limit is {max_bytes} bytes"
        )
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


# -- the workflow ----------------------------------------------------------------------

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
_WORKFLOW_IDEMPOTENT = {"all": "all", "none": ""}


def _definition(root: yaml.MappingNode, context: _Context) -> Definition:
    # Keys are read in the order written, so the first problem in the file is
    # the one reported; what is missing is reported after.
    values: dict[str, Any] = {"version": DEFAULT_VERSION}
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
    # A number is taken as written (`1.10` stays "1.10"); absent or null is
    # DEFAULT_VERSION ("1").
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


# -- parameters ------------------------------------------------------------------------

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
