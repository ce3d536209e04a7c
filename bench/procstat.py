"""CPU time of a process from /proc: the server's CPU per activity is the
figure that does not depend on how busy the rest of the shared machine is."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of all the threads of `pid` so far, in seconds.

    The resolution is one clock tick (10 ms), so measure windows of seconds."""
    fields = stat_fields(pid)
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLOCK_TICKS


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from its third field (the state) on: [1] is the parent,
    [11] / [12] the process's user / system ticks, [13] / [14] those of the
    children it has waited for."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name may contain spaces; the fields after its ')' do not.
    return text[text.rindex(")") + 2 :].split()


def machine_busy_seconds() -> float:
    """CPU time the whole machine has spent busy so far, all cores and every
    process together (user, nice, system, irq and softirq; not idle, iowait or
    steal), in seconds. Over a window where the cores are saturated, what a unit
    of work costs the machine decides how many units a second it can do."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[1:8])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return out


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` of `pid` and of its children alive now (the workers of a
    `weft server --workers N`)."""
    total = cpu_seconds(pid)
    for child in children(pid):
        try:
            total += cpu_seconds(child)
        except FileNotFoundError:
            continue
    return total


def machine() -> dict[str, object]:
    """What the numbers were measured on."""
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": os.uname().release,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def resident_mib(pid: int) -> float:
    """The resident memory of `pid` now, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no VmRSS for process {pid}")
