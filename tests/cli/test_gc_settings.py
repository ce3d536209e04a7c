"""The collector settings of Weft's long-running processes (in a process of
their own: the test process keeps CPython's defaults)."""

from __future__ import annotations

import subprocess
import sys

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
