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


def test_a_busy_interpreter_shows_as_the_interpreter(tmp_path: Path) -> None:
    if shutil.which("perf") is None:
        pytest.skip("Linux perf is not installed (Debian: linux-perf)")
    busy = subprocess.Popen(
        [sys.executable, "-c", "while True: sum(range(1000))"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        recording = native_profile.start(busy.pid, tmp_path)
        time.sleep(1.5)
        profile = native_profile.stop(recording)
    finally:
        busy.kill()
        busy.wait()
    # The loop runs in the interpreter (statically linked into some Pythons:
    # then its symbols are in the executable, which this table calls "other").
    interpreter = profile.parts.get("Python interpreter", 0.0) + profile.parts.get("other", 0.0)
    assert interpreter > 50, profile.parts
    assert any("Eval" in name for _, name in profile.symbols), profile.symbols[:5]
    lines = native_profile.render(profile, "busy")
    assert lines[1] == "busy CPU by native code (perf samples):"
