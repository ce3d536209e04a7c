"""The step-workflow definition parser: every refusal with its line and
reason, and reading files and folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.steps.definitions import (
    refused,
)
from workers.steps.definition import DefinitionError, load_dir, load_file, parse

# --- refusals -----------------------------------------------------------------------------

W = "name: wf\nsteps:\n"  # steps start on line 3

REFUSED: dict[str, tuple[str, int, str]] = {
    # id: (definition, the line named, what the reason says)
    "bad-yaml": ("name: wf\nsteps: [a, b\ntimeout: 1h\n", 3, "expected ','"),
    "not-a-mapping": ("- name: wf\n", 1, "a workflow definition is a mapping"),
    "scalar-root": ("\n\njust text\n", 3, "a workflow definition is a mapping"),
    "empty": ("", 1, "a workflow definition is a mapping"),
    "two-documents": ("name: wf\nsteps: [return x]\n---\nname: b\n", 3, "single document"),
    "duplicate-yaml-key": (W + "  - return x\nname: again\n", 4, "duplicate key 'name'"),
    "unknown-key": (
        "name: wf\nretries: 3\nsteps: [return x]\n",
        2,
        "unknown key 'retries' (known: continue-as-new-after,",
    ),
    "key-twice": ("name: wf\ntask_list: a\ntask-list: b\n", 3, "'task-list' is given twice"),
    "missing-name": ("# hi\nsteps: [return x]\n", 1, "`name` is required"),
    "empty-name": ("name: ''\nsteps: [return x]\n", 1, "`name` must not be empty"),
    "name-not-text": ("steps: [return x]\nname:\n  a: b\n", 3, "name must be text, not a map"),
    "missing-steps": ("name: wf\nversion: '2'\n", 1, "`steps` is required"),
    "empty-steps": ("name: wf\nsteps: []\n", 2, "`steps` must be a non-empty list"),
    "steps-not-a-list": ("name: wf\nsteps: return x\n", 2, "`steps` must be a non-empty list"),
    "bad-workflow-timeout": ("name: wf\ntimeout: 5x\n", 2, "timeout: invalid duration '5x'"),
    "huge-workflow-timeout": (
        "name: wf\ntimeout: 99999999999h\n",
        2,
        "timeout: duration '99999999999h' is out of range",
    ),
    "bad-execution-timeout": (
        "name: wf\nexecution-timeout: soon\n",
        2,
        "execution-timeout: invalid duration 'soon'",
    ),
    "bad-workflow-replayable": (
        "name: wf\nreplayable: from here\n",
        2,
        "replayable must be one of enabled | disabled | from start | automatically",
    ),
    "bad-workflow-idempotent": ("name: wf\nidempotent: yes\n", 2, "idempotent must be one of all"),
    "lock-without-name": ("name: wf\nlock: {scope: x}\n", 2, "a lock map needs `name`"),
    "lock-unknown-key": ("name: wf\nlock:\n  name: a\n  entity: b\n", 4, "unknown lock key"),
    "empty-retention": ("name: wf\nretention: ''\n", 2, "`retention` must not be empty"),
    "bad-parameter-default": (
        "name: wf\nparameters:\n  n: {type: integer,\n      default: abc}\n",
        4,
        "parameter 'n': default 'abc' is not of type integer",
    ),
    "bad-parameter-type": (
        "name: wf\nparameters:\n  n: {type: number}\n",
        3,
        "parameter 'n' type must be one of string | integer",
    ),
    "bad-parameter-key": (
        "name: wf\nparameters:\n  n:\n    a: 1\n",
        4,
        "parameter 'n': unknown key 'a'",
    ),
    "bad-parameter-required": (
        "name: wf\nparameters:\n  n: {required: maybe}\n",
        3,
        "parameter 'n' required must be one of true",
    ),
    "unknown-step-type": (
        W + "  - log x\n  - frobnicate now\n",
        4,
        "unknown step type 'frobnicate' (known: activity, child, fail,",
    ),
    "unknown-type-key": (W + "  - type: nope\n", 3, "unknown step type 'nope'"),
    "empty-step": (W + "  - log x\n  -\n", 4, "empty step"),
    "type-and-shorthand": (
        W + "  - type: log\n    step: log x\n",
        4,
        "give either `type:` or `step:` (shorthand), not both",
    ),
    "two-shorthands": (W + "  - step: log x\n    s: log y\n", 4, "give one of `step:` and `s:`"),
    "no-type": (W + "  - message: hi\n", 3, "a step map needs `type:` or `step:`"),
    "shorthand-and-key": (
        W + "  - step: log x\n    message: y\n",
        4,
        "`message` is given by the shorthand and as a key",
    ),
    "input-and-key": (
        W + "  - step: log x\n    input: {a: 1}\n    a: 2\n",
        5,
        "'a' is given both as a key and in `input`",
    ),
    "input-not-a-map": (W + "  - step: log x\n    input: [1]\n", 4, "input must be a map"),
    "duplicate-id": (
        W + "  - id: a\n    step: log x\n  - id: a\n    step: log y\n",
        5,
        "duplicate id 'a' (first on line 3)",
    ),
    "duplicate-nested-id": (
        W + "  - id: a\n    step: log x\n  - type: workflow\n    steps:\n"
        "      - id: a\n        step: log y\n",
        7,
        "duplicate id 'a'",
    ),
    "duplicate-label": (W + "  - label a\n  - label a\n", 4, "duplicate id 'a'"),
    "reserved-id": (W + "  - id: End\n    step: log x\n", 3, "id 'End' is reserved"),
    "reserved-label": (W + "  - label here\n", 3, "id 'here' is reserved"),
    "id-not-a-word": (W + "  - id: a b\n    step: log x\n", 3, "id must be one word"),
    "id-on-handler": (
        W + "  - step: log x\n    on-error:\n      - id: h\n        step: log y\n",
        5,
        "a step inside on-error may not have an id",
    ),
    "id-inside-a-handler": (
        W + "  - step: log x\n    on-error:\n      - steps:\n          - label h\n",
        6,
        "a step inside on-error may not have an id",
    ),
    "id-on-workflow-handler": (
        "name: wf\non-error:\n  - id: h\n    step: log y\nsteps: [log x]\n",
        3,
        "may not have an id",
    ),
    "label-and-id": (W + "  - id: a\n    step: label b\n", 3, "`label ID` sets the id"),
    "label-without-id": (W + "  - type: label\n", 3, "label needs an id"),
    "bad-step-timeout": (
        W + "  - step: log x\n    timeout: 10 minutes\n",
        4,
        "timeout: invalid duration '10 minutes'",
    ),
    "bad-sleep": (W + "  - log x\n  - sleep 5x\n", 4, "sleep duration: invalid duration '5x'"),
    "bad-wait-timeout": (
        W + "  - wait signal go timeout soon\n",
        3,
        "wait timeout: invalid duration 'soon'",
    ),
    "bad-activity-timeout": (
        W + "  - step: activity a\n    heartbeat_timeout: 5\n",
        4,
        "activity heartbeat: invalid duration '5'",
    ),
    "bad-idempotent": (
        W + "  - step: log x\n    idempotent: maybe\n",
        4,
        "idempotent must be one of",
    ),
    "bad-step-replayable": (
        W + "  - step: log x\n    replayable: from start\n",
        4,
        "replayable must be one of from here | from here only | reset",
    ),
    "bad-let-type": (
        W + "  - let number x = 1\n",
        3,
        "unknown type 'number' for let (known: integer, double,",
    ),
    "let-without-value": (W + "  - log x\n  - let x\n", 4, "`let [TYPE] NAME = VALUE`"),
    "let-long-without-value": (
        W + "  - type: let\n    variable: x\n",
        3,
        "let needs `NAME = VALUE`",
    ),
    "let-bad-name": (W + "  - let a-b! = 1\n", 3, "bad variable name 'a-b!'"),
    "transform-without-ops": (W + "  - transform x = 1\n", 3, "cannot read 'x = 1'"),
    "transform-empty-op": (W + "  - transform x = 1 | | trim\n", 3, "none empty"),
    "log-without-message": (W + "  - log\n", 3, "log needs a message"),
    "bad-log-level": (
        W + "  - step: log x\n    level: loud\n",
        4,
        "log level must be one of debug, info, warning, error",
    ),
    "wait-without-signal": (W + "  - wait for it\n", 3, "cannot read 'for it'"),
    "goto-without-target": (W + "  - type: goto\n", 3, "goto needs a target"),
    "bad-goto-target": (W + "  - log x\n  - goto nowhere\n", 4, "goto 'nowhere' is not a step id"),
    "bad-next-target": (
        W + "  - step: log x\n    next: nowhere\n",
        4,
        "next 'nowhere' is not a step id (known: start, end, exit, last, default)",
    ),
    "bad-retry-target": (W + "  - retry from nowhere\n", 3, "retry from 'nowhere' is not"),
    "next-in-any-case": (W + "  - step: log x\n    next: END\n", 4, "'END' is not a step id"),
    "bad-retry-limit": (W + "  - retry limit soon\n", 3, "retry limit: invalid retry limit"),
    "bad-retry-limit-list": (
        W + "  - type: retry\n    limit:\n      - 3\n      - often\n",
        6,
        "retry limit:",
    ),
    "bad-retry-backoff": (
        W + "  - retry backoff 1s increasing fast\n",
        3,
        "retry backoff: invalid retry backoff",
    ),
    "bad-retry-replay": (W + "  - type: retry\n    replay: maybe\n", 4, "retry replay must be"),
    "retry-replay-false-without-target": (
        W + "  - type: retry\n    replay: false\n",
        3,
        "retry with replay false needs a target",
    ),
    "if-literal-target": (W + "  - if yes then log x\n", 3, "if 'yes' is always true"),
    "if-without-then": (W + "  - if ${x}\n", 3, "if needs `then`"),
    "if-without-condition": (W + "  - type: if\n    then: log x\n", 3, "if needs a condition"),
    "if-test-twice": (
        W + "  - step: if ${x} then log x\n    condition: {target: ${y}}\n",
        4,
        "if has a shorthand test and `condition`: give one",
    ),
    "switch-without-cases": (W + "  - switch ${x}\n", 3, "switch needs cases"),
    "switch-case-without-condition": (
        W + "  - step: switch ${x}\n    cases:\n      - log a\n      - log b\n",
        5,
        "every switch case but the last needs a condition",
    ),
    "foreach-without-steps": (W + "  - foreach x in ${y}\n", 3, "foreach needs steps"),
    "foreach-without-items": (
        W + "  - step: foreach x\n    do: log x\n",
        3,
        "foreach needs items",
    ),
    "reducing-with-concurrency": (
        W + "  - step: foreach x in ${y} do log x\n    reducing: {t: 0}\n    concurrency: 2\n",
        5,
        "reducing needs concurrency 1",
    ),
    "reducing-not-a-map": (
        W + "  - step: foreach x in ${y} do log x\n    reducing: total\n",
        4,
        "reducing must be a map",
    ),
    "workflow-without-steps": (W + "  - type: workflow\n", 3, "workflow needs steps"),
    "workflow-setting-with-steps": (
        W + "  - step: workflow retention 3\n    steps: [log x]\n",
        4,
        "a `workflow` setting step takes no `steps`",
    ),
    "workflow-bad-setting": (
        W + "  - workflow replayable sometimes\n",
        3,
        "workflow replayable must be one of",
    ),
    "empty-inline-list": (W + "  - []\n", 3, "an empty list is not a step"),
    "activity-without-type": (W + "  - type: activity\n", 3, "activity needs a type"),
    "http-without-url": (W + "  - http\n", 3, "http needs a url"),
    "shell-without-command": (W + "  - type: shell\n", 3, "shell needs a command"),
    "signal-without-name": (W + "  - type: signal\n    workflow_id: w\n", 3, "signal needs"),
    "child-without-type": (W + "  - child\n", 3, "child needs a workflow type"),
    "no-op-with-words": (W + "  - no-op now\n", 3, "cannot read 'now': use `no-op`"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_refused_with_line_and_reason(case: str) -> None:
    text, line, reason = REFUSED[case]
    message = refused(text)
    assert message.startswith(f"wf.yaml:{line}: "), message
    assert reason in message, message


def test_the_default_file_name() -> None:
    with pytest.raises(DefinitionError, match=r"^<definition>:1: `name` is required"):
        parse("steps: [return x]\n")


def test_the_first_problem_in_the_file_is_reported() -> None:
    # the bad timeout on line 2 comes before the missing `steps`
    assert refused("name: wf\ntimeout: forever\n").startswith("wf.yaml:2: ")


# --- files and folders --------------------------------------------------------------------


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("name: a\nsteps: [return x]\n", encoding="utf-8")
    loaded = load_file(path)
    assert (loaded.name, loaded.path, loaded.source) == ("a", str(path), path.read_text())


@pytest.mark.parametrize(
    ("contents", "line", "reason"),
    [
        (b"name: caf\xe9\nsteps: [return x]\n", 1, "not UTF-8 text"),
        (b"name: a\nsteps:\n  - log \xff\n", 3, "not UTF-8 text"),
        (b"name: bell\x07\nsteps: [return x]\n", 1, "special characters are not allowed"),
    ],
    ids=["not-utf8", "not-utf8-later", "control-character"],
)
def test_load_file_refuses_unreadable_text(
    contents: bytes, line: int, reason: str, tmp_path: Path
) -> None:
    message = refused(contents, tmp_path)
    assert message.startswith(f"{tmp_path / 'bad.yaml'}:{line}: "), message
    assert reason in message


def test_load_file_that_cannot_be_read(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.yaml", tmp_path):
        with pytest.raises(DefinitionError) as caught:
            load_file(path)
        assert str(caught.value).startswith(f"{path}: cannot read: ")


def test_load_dir_reads_yaml_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text("name: b\nsteps: [return x]\n")
    (tmp_path / "a.yaml").write_text("name: a\nversion: 2\nsteps: [return x]\n")
    (tmp_path / "c.yaml").write_text("name: a\nsteps: [return x]\n")  # another version
    (tmp_path / "notes.txt").write_text("not a definition")
    (tmp_path / "sub.yaml").mkdir()
    loaded = load_dir(tmp_path)
    assert [(d.name, d.version, Path(d.path).name) for d in loaded] == [
        ("a", "2", "a.yaml"),
        ("b", "1", "b.yml"),
        ("a", "1", "c.yaml"),
    ]


def test_load_dir_refuses_a_type_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: same\nsteps: [return x]\n")
    (tmp_path / "b.yaml").write_text("name: same\nversion: '1'\nsteps: [return y]\n")
    with pytest.raises(DefinitionError) as caught:
        load_dir(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'b.yaml'}: workflow same version 1 is also defined in {tmp_path / 'a.yaml'}"
    )


def test_load_dir_reports_the_bad_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nsteps: [frobnicate]\n")
    with pytest.raises(DefinitionError, match=r"a\.yaml:2: unknown step type 'frobnicate'"):
        load_dir(tmp_path)


def test_load_dir_reads_no_endless_file(tmp_path: Path) -> None:
    """A folder's files are read as `weft register` reads one, at most one byte
    past the limit; what is no regular file (`/dev/zero`, a FIFO, which would
    block) is not opened at all."""
    (tmp_path / "a.yaml").write_text("name: a\nsteps: [return x]\n")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe.yaml")
    assert [d.name for d in load_dir(tmp_path)] == ["a"]
    (tmp_path / "huge.yaml").write_text("name: huge\nsteps: [return x]\n" + "#" * 256 * 1024)
    with pytest.raises(DefinitionError) as caught:
        load_dir(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'huge.yaml'}: the definition is more than 262144 bytes:"
        " the limit is 262144 bytes"
    )
