"""`weft register FILE.yaml …`: a step-workflow definition's type and defaults
are used by a later `weft start`; a bad file (YAML or step language) is refused
with `FILE:LINE: reason`, exit 2, and nothing at all is registered (every file
is checked before any is sent)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.support import error_line, ok, ok_json, unreachable_address, weft
from tests.helpers import unique
from tests.serverproc import WEFT

STEPS = "steps:\n  - return done\n"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def assert_not_registered(address: str, name: str, version: str = "1") -> None:
    """Without a registered default task list, `weft start NAME` is refused
    (a definition without `version` is version "1")."""
    args = ["--version", version] if version else []
    line = error_line(weft("start", name, *args, address=address), "start", 2)
    assert "task_list is required" in line


def test_register_sets_the_defaults_start_uses(address: str, tmp_path: Path) -> None:
    name, task_list = unique("cli-reg"), unique("reg-tl")
    path = write(
        tmp_path,
        "order.yaml",
        f"""\
# an order workflow
name: {name}
version: "3"
task-list: {task_list}
timeout: 5m
execution-timeout: 1h30m
decider-timeout: 20s
description: registered by the CLI tests
steps:
  - log ordering
  - return done
""",
    )
    out = ok(weft("register", str(path), address=address))
    assert out.strip() == f"registered {name} version 3 from {path}"

    run = ok_json(weft("start", name, "--version", "3", "--json", address=address))
    doc = ok_json(weft("describe", run["workflow_id"], "--json", address=address))
    assert doc["workflow_type"] == name
    assert doc["version"] == "3"
    assert doc["task_list"] == task_list
    # `timeout` is the step workflow's own timeout, not the execution timeout
    assert doc["execution_timeout"] == 5400
    assert doc["decider_timeout"] == 20
    # options given on the command line still win
    run = ok_json(
        weft(
            "start", name, "--version", "3", "--task-list", "elsewhere",
            "--execution-timeout", "5m", "--json",
            address=address,
        )
    )  # fmt: skip
    doc = ok_json(weft("describe", run["workflow_id"], "--json", address=address))
    assert doc["task_list"] == "elsewhere"
    assert doc["execution_timeout"] == 300


def test_register_several_files_and_the_default_version(address: str, tmp_path: Path) -> None:
    first, second = unique("cli-reg-a"), unique("cli-reg-b")
    a = write(tmp_path, "a.yml", f"name: {first}\ntask-list: tl-a\n{STEPS}")
    b = write(tmp_path, "b.yaml", f"name: {second}\ntask_list: tl-b\nversion: 2.10\n{STEPS}")
    out = ok(weft("register", str(a), str(b), address=address))
    # no `version` is version "1"; a number is taken as written
    assert out.splitlines() == [
        f"registered {first} version 1 from {a}",
        f"registered {second} version 2.10 from {b}",
    ]
    run = ok_json(weft("start", first, "--version", "1", "--json", address=address))
    assert ok_json(weft("describe", run["workflow_id"], "--json", address=address))[
        "task_list"
    ] == ("tl-a")


BAD_FILES = {
    # id: (file name, contents, the line the message must name, what it must say)
    "malformed-yaml": ("broken.yaml", "name: {name}\ntask-list: [a, b\ntimeout: 1h\n", None, ""),
    "unknown-key": ("unknown.yaml", "name: {name}\ntask-list: tl\ntaskList: tl\n", 3, "taskList"),
    "bad-duration": ("duration.yaml", "name: {name}\ntask-list: tl\ntimeout: 5x\n", 3, "5x"),
    "bad-decider-timeout": (
        "decider.yaml",
        "name: {name}\ntask-list: tl\ndecider-timeout: soon\n",
        3,
        "soon",
    ),
    "list-not-mapping": ("list.yaml", "- name: {name}\n- task-list: tl\n", 1, "mapping"),
    "empty-file": ("empty.yaml", "", 1, "mapping"),
    "no-name": ("noname.yaml", "# {name}\nversion: '1'\ntask-list: tl\n", 1, "name"),
    "name-not-plain": ("nested.yaml", "task-list: tl\nname:\n  n: {name}\n", 3, "name"),
    "two-documents": ("two.yaml", "name: {name}\ntask-list: tl\n---\nname: other\n", 3, ""),
    "bad-execution-timeout": (
        "exec.yaml",
        "name: {name}\ntask-list: tl\nexecution-timeout: soon\n",
        3,
        "soon",
    ),
    "no-steps": ("nosteps.yaml", "name: {name}\ntask-list: tl\n", 1, "steps"),
    "unknown-step-type": (
        "steptype.yaml",
        "name: {name}\nsteps:\n  - log hi\n  - frobnicate now\n",
        4,
        "unknown step type 'frobnicate'",
    ),
    "duplicate-id": (
        "ids.yaml",
        "name: {name}\nsteps:\n  - id: a\n    step: log one\n  - id: a\n    step: log two\n",
        5,
        "duplicate id 'a'",
    ),
    "bad-goto": ("goto.yaml", "name: {name}\nsteps:\n  - goto nowhere\n", 3, "'nowhere'"),
    "let-without-value": (
        "let.yaml",
        "name: {name}\nsteps:\n  - log hi\n  - let x\n",
        4,
        "NAME = VALUE",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_a_bad_file_exits_2_naming_file_and_line(case: str, address: str, tmp_path: Path) -> None:
    file_name, text, line_no, says = BAD_FILES[case]
    name = unique("cli-bad")
    path = write(tmp_path, file_name, text.format(name=name))
    done = weft("register", str(path), address=address)
    line = error_line(done, "register", 2)
    where = re.escape(str(path)) + (rf":{line_no}: " if line_no else r":\d+: ")
    assert re.search(rf"^weft register: {where}", line), line
    assert says in line
    assert done.stdout == ""
    assert_not_registered(address, name)


def test_a_missing_file_exits_2(address: str, tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    done = weft("register", str(path), address=address)
    line = error_line(done, "register", 2)
    assert line.startswith(f"weft register: {path}:")
    assert "cannot read" in line


def test_a_directory_exits_2(address: str, tmp_path: Path) -> None:
    line = error_line(weft("register", str(tmp_path), address=address), "register", 2)
    assert line.startswith(f"weft register: {tmp_path}:")


def test_one_bad_file_registers_nothing(address: str, tmp_path: Path) -> None:
    good_name, bad_name = unique("cli-good"), unique("cli-bad")
    good = write(tmp_path, "good.yaml", f"name: {good_name}\ntask-list: tl\n{STEPS}")
    bad = write(tmp_path, "bad.yaml", f"name: {bad_name}\ntask-list: tl\nretries: 3\n")
    done = weft("register", str(good), str(bad), address=address)
    line = error_line(done, "register", 2)
    assert line.startswith(f"weft register: {bad}:3: ")
    assert done.stdout == ""
    assert_not_registered(address, good_name)
    assert_not_registered(address, bad_name)


@pytest.mark.parametrize(
    "contents",
    [b"name: caf\xe9\ntask-list: tl\n", b"name: bell\x07\ntask-list: tl\n"],
    ids=["not-utf8", "control-character"],
)
def test_an_unreadable_file_exits_2_naming_it(
    contents: bytes, address: str, tmp_path: Path
) -> None:
    path = write(tmp_path, "binary.yaml", contents)
    line = error_line(weft("register", str(path), address=address), "register", 2)
    assert re.match(rf"^weft register: {re.escape(str(path))}:\d+: ", line), line


def test_a_bad_file_is_refused_before_contacting_the_server(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "name: x\ntimeout: forever\n")
    line = error_line(weft("register", str(path), address=unreachable_address()), "register", 2)
    assert line.startswith(f"weft register: {path}:2: ")


def test_a_definition_over_the_limit_registers_nothing(address: str, tmp_path: Path) -> None:
    good_name, big_name = unique("cli-good"), unique("cli-big")
    good = write(tmp_path, "good.yaml", f"name: {good_name}\ntask-list: tl\n{STEPS}")
    padding = "# " + "x" * 1000 + "\n"
    big = write(tmp_path, "big.yaml", f"name: {big_name}\ntask-list: tl\n{STEPS}" + padding * 300)
    done = weft("register", str(good), str(big), address=address)
    line = error_line(done, "register", 2)
    assert line.startswith(f"weft register: {big}: the definition is ")
    assert "the limit is 262144 bytes" in line
    assert_not_registered(address, good_name)
    assert_not_registered(address, big_name)


def test_an_endless_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    # Before, the whole file was read, then measured: /dev/zero until memory ran out.
    done = subprocess.run(
        ["/bin/sh", "-c", 'ulimit -v 1000000 && exec "$@"', "sh", str(WEFT), "register",
         "/dev/zero", "--address", unreachable_address()],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    line = error_line(done, "register", 2)
    assert line == (
        "weft register: /dev/zero: the definition is more than 262144 bytes:"
        " the limit is 262144 bytes"
    )


def test_a_start_without_a_version_snapshots_the_registered_definition(
    address: str, tmp_path: Path
) -> None:
    """`weft start NAME` finds the definition registered as version "1" (a
    definition's default) and copies its text into `WorkflowStarted`."""
    name = unique("cli-snap")
    text = f"name: {name}\ntask-list: {unique('tl')}\n{STEPS}"
    ok(weft("register", str(write(tmp_path, "snap.yaml", text)), address=address))
    run = ok_json(weft("start", name, "--json", address=address))
    doc = ok_json(weft("history", run["workflow_id"], "--json", address=address))
    started = doc["events"][0]
    assert started["type"] == "WorkflowStarted"
    assert started["attributes"]["workflow_type"] == {"name": name, "version": "1"}
    assert started["attributes"]["definition"] == text
