"""The collector settings of Weft's long-running processes (in a process of
their own: the test process keeps CPython's defaults)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli.gc_settings import YOUNG_COLLECTION_EVERY

PROBE = """
import gc
before = gc.get_threshold()
from cli.gc_settings import tune_collector
tune_collector()
after = gc.get_threshold()
print(after[0], after[1:] == before[1:], gc.get_freeze_count() > 0)
"""


def test_the_young_generation_is_collected_less_often_and_start_up_is_frozen() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(YOUNG_COLLECTION_EVERY), "True", "True"]


PROBE_MODULE = """
import gc, os
with open(os.environ["GC_PROBE_OUT"], "w") as out:
    out.write(str(gc.get_threshold()[0]))
"""


def test_a_worker_process_runs_with_the_settings(tmp_path: Path) -> None:
    """`weft runner` tunes the collector before it loads its modules: a module
    it loads sees the settings (the runner then stops: it has no activities)."""
    (tmp_path / "gc_probe.py").write_text(PROBE_MODULE)
    out = tmp_path / "threshold"
    weft = Path(sys.executable).parent / "weft"
    env = {**os.environ, "GC_PROBE_OUT": str(out), "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [str(weft), "runner", "--address", "127.0.0.1:1", "gc_probe"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "no @activity functions in gc_probe" in done.stderr
    assert out.read_text() == str(YOUNG_COLLECTION_EVERY)
