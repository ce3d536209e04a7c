"""`SqliteNodeLock`: one node per SQLite file, the lock gone with its process,
even when that process forked a child that lives on (an embedded activity's
`multiprocessing`): a `flock` was shared with the child, and kept the restart out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.store.node_lock import NodeLockTaken, SqliteNodeLock

# Takes the lock, forks a child that sleeps on, then dies at once (as kill -9 would).
_FORK_THEN_DIE = """
import os, sys, time
from orchestrator.store.node_lock import SqliteNodeLock
SqliteNodeLock.take(sys.argv[1])
child = os.fork()
if child == 0:
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)  # (so that the test's pipes end with the parent)
    time.sleep(30)
    os._exit(0)
print(child, flush=True)
os._exit(0)
"""


def test_a_second_take_is_refused_naming_the_holder(tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time\nfrom orchestrator.store.node_lock import"
         " SqliteNodeLock\nSqliteNodeLock.take(sys.argv[1]); print('locked', flush=True)"
         "\ntime.sleep(30)", db],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        said = rf"another node serves .* \(process {holder.pid}\)"
        with pytest.raises(NodeLockTaken, match=said):
            SqliteNodeLock.take(db)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    SqliteNodeLock.take(db).release()  # (gone with its process)


def test_the_lock_goes_with_its_process_not_with_a_child_it_forked(tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    done = subprocess.run(
        [sys.executable, "-c", _FORK_THEN_DIE, db], capture_output=True, text=True, timeout=30
    )
    child = int(done.stdout)
    try:
        os.kill(child, 0)  # (the child still sleeps, lock or no lock)
        SqliteNodeLock.take(db).release()
    finally:
        os.kill(child, signal.SIGKILL)
