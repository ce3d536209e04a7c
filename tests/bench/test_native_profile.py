"""`bench.hotpath --perf`: Linux perf's report read into shares of native code,
from a real recording of a Python process that burns CPU in the interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import native_profile

REPORT = """\
# To display the perf.data header info, please use --header/--header-only options.
#
# Overhead  Shared Object
# ........  ....................
#
    59.34%  libpython3.11.so.1.0
    21.21%  [kernel.kallsyms]
     6.54%  cygrpc.cpython-311-x86_64-linux-gnu.so
     0.64%  libpq-e9b5c9ac.so.5.18

#
# (Tip: use --sort to order by something else)
#
"""


def test_a_report_reads_as_rows_in_order() -> None:
    assert native_profile.read_report(REPORT) == [
        (59.34, "libpython3.11.so.1.0"),
        (21.21, "[kernel.kallsyms]"),
        (6.54, "cygrpc.cpython-311-x86_64-linux-gnu.so"),
        (0.64, "libpq-e9b5c9ac.so.5.18"),
    ]


def _perf_records(tmp_path: Path) -> None:
    """Skip where perf is missing or may not record (a container, a kernel
    without its tools, perf_event_paranoid)."""
    exe = shutil.which("perf")
    if exe is None:
        pytest.skip("Linux perf is not installed (Debian: linux-perf)")
    probe = subprocess.run(
        [exe, "record", "-o", str(tmp_path / "probe.data"), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"perf cannot record here: {probe.stderr.strip()[-300:]}")


def test_a_busy_interpreter_shows_as_the_interpreter(tmp_path: Path) -> None:
    _perf_records(tmp_path)
    busy = subprocess.Popen(
        # Bytecode, not a builtin's loop in C: `sum(range(1000))` spent its
        # samples in allocation and `builtin_sum`, and on a loaded machine once
        # showed no evaluation loop among the top 25 symbols (CI, 2026-11-29).
        [sys.executable, "-c", "while True:\n x = 0\n for i in range(1000): x += i"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        recording = native_profile.start(busy.pid, tmp_path)
        time.sleep(1.5)
        native_profile.stop(recording)
    finally:
        busy.kill()
        busy.wait()
    profile = native_profile.summarise(recording)
    assert profile.parts.get("Python interpreter", 0.0) > 50, profile.parts
    assert profile.event, "the sampled event is named"
    assert any("Eval" in name for _, name in profile.symbols), profile.symbols[:5]
    lines = native_profile.render(profile, "busy")
    assert lines[1] == f"busy CPU by native code (perf samples of {profile.event}):"


def test_a_process_perf_cannot_watch_is_said_at_once(tmp_path: Path) -> None:
    _perf_records(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # (its pid names no process now)
    with pytest.raises(SystemExit, match="perf record failed"):
        native_profile.start(gone.pid, tmp_path)


def test_a_recording_that_wrote_nothing_is_said(tmp_path: Path) -> None:
    # (No perf needed: a process that stands in for it and writes no data file.)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    log = tmp_path / "perf.log"
    log.write_text("failed to open the events\n")
    recording = native_profile.Recording(stand_in, tmp_path / "perf.data", log)
    with pytest.raises(SystemExit, match=r"perf recorded nothing.*failed to open the events"):
        native_profile.stop(recording)
    assert stand_in.returncode is not None  # (stopped, not left behind)


def test_a_report_perf_cannot_read_is_said(tmp_path: Path) -> None:
    if shutil.which("perf") is None:
        pytest.skip("Linux perf is not installed (Debian: linux-perf)")
    data = tmp_path / "perf.data"
    data.write_bytes(b"not a perf file")
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    recording = native_profile.Recording(done, data, tmp_path / "perf.log")
    with pytest.raises(SystemExit, match="perf report failed"):
        native_profile.summarise(recording)
