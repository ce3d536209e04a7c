"""Where a process's CPU goes in native code: Linux `perf record` of one process
while the bench runs, summed by shared object, by thread name and by symbol.

py-spy sees Python frames only: time spent in a C call (a libpq send, a
grpc.aio stream write) lands on the Python line that made it, and a thread
waiting for the GIL can look busy there too. perf samples what the CPU ran, so
it tells the interpreter from the kernel, gRPC's core, protobuf and libpq. It
cannot name the Python functions the interpreter ran (Python 3.11 has no perf
trampoline): `bench.hotpath --py-spy` does that part.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# What a shared object's name says it is; the first match wins.
PARTS = (
    ("libpython", "Python interpreter"),
    ("python3", "Python interpreter"),  # (an executable with the interpreter linked in)
    ("[kernel", "kernel"),
    ("cygrpc", "gRPC core"),
    ("uvloop", "uvloop (libuv)"),
    ("_message", "protobuf"),
    ("libc.so", "libc (malloc, memcpy)"),
    ("libpq", "libpq"),
    ("_psycopg", "psycopg (C)"),
    ("pq.cpython", "psycopg (C)"),
    ("_json", "json (C)"),
    ("libcrypto", "OpenSSL"),
    ("_asyncio", "asyncio (C)"),
    ("_greenlet", "greenlet"),
)
FREQUENCY = 999  # samples a second: off the timer's beat
STARTUP = 0.5  # seconds for perf to attach, or to fail to


@dataclass
class Recording:
    """A `perf record` under way, or done: its process, data file and output."""

    proc: subprocess.Popen[bytes]
    data: Path
    log: Path


@dataclass
class NativeProfile:
    """Shares of the samples, in percent, and what perf sampled (`cpu-clock`,
    `cycles`, with `:u` when it could see user space only)."""

    event: str = ""
    parts: dict[str, float] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)
    symbols: list[tuple[float, str]] = field(default_factory=list)
    file: str = ""


def perf_exe() -> str:
    """Where `perf` is, or a SystemExit that says how to get it."""
    exe = shutil.which("perf")
    if exe is None:
        raise SystemExit(
            "bench.hotpath: --perf needs Linux perf (Debian: apt-get install linux-perf)"
        )
    return exe


def start(pid: int, log_dir: Path) -> Recording:
    """Sample process `pid` (all its threads) until `stop`; a perf that cannot
    (not permitted, no such process) is a SystemExit now, not an empty profile
    after the run."""
    data, log = log_dir / "perf.data", log_dir / "perf.log"
    argv = [perf_exe(), "record", "-F", str(FREQUENCY), "-p", str(pid), "-o", str(data)]
    with log.open("wb") as err:  # (perf holds its own copy of the file)
        recording = Recording(
            subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err), data, log
        )
    time.sleep(STARTUP)
    if recording.proc.poll() is not None:
        raise SystemExit(f"bench.hotpath: perf record failed: {_tail(recording.log)}")
    return recording


def stop(recording: Recording) -> None:
    """End the recording (perf writes its file out on SIGINT)."""
    recording.proc.send_signal(signal.SIGINT)
    recording.proc.wait(timeout=60)
    if not recording.data.exists() or recording.data.stat().st_size == 0:
        raise SystemExit(
            f"bench.hotpath: perf recorded nothing (exit code {recording.proc.returncode}):"
            f" {_tail(recording.log)}"
        )


def summarise(recording: Recording) -> NativeProfile:
    """The stopped recording's shares by native code, thread and symbol."""
    data = recording.data
    parts: dict[str, float] = {}
    for share, name in read_report(_perf(data, "report", "--sort", "dso")):
        part = next((label for marker, label in PARTS if marker in name), "other")
        parts[part] = parts.get(part, 0.0) + share
    threads: dict[str, float] = {}
    for share, name in read_report(_perf(data, "report", "--sort", "comm")):
        threads[name] = threads.get(name, 0.0) + share
    symbols = read_report(_perf(data, "report", "--sort", "sym"))[:25]
    event = _perf(data, "evlist").strip().replace("\n", ", ")
    return NativeProfile(event, parts, threads, symbols, str(data))


def _perf(data: Path, command: str, *args: str) -> str:
    done = subprocess.run(
        [
            perf_exe(),
            command,
            "-i",
            str(data),
            *args,
            *(["--stdio"] if command == "report" else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench.hotpath: perf {command} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _tail(log: Path) -> str:
    text = log.read_text(errors="replace").strip() if log.exists() else ""
    return text[-500:] or "(it said nothing)"


def read_report(text: str) -> list[tuple[float, str]]:
    """(percent, name) for each row of `perf report --stdio`, in its order;
    comment lines and anything that is not a row are skipped."""
    rows: list[tuple[float, str]] = []
    for line in text.splitlines():
        head, _, name = line.strip().partition(" ")
        if not head.endswith("%"):
            continue
        try:
            share = float(head[:-1])
        except ValueError:
            continue
        rows.append((share, name.strip()))
    return rows


def render(profile: NativeProfile, process: str) -> list[str]:
    lines = ["", f"{process} CPU by native code (perf samples of {profile.event}):"]
    for name, share in sorted(profile.parts.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:<24}{share:6.1f} %")
    lines += ["", "by thread name:"]
    for name, share in sorted(profile.threads.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:<24}{share:6.1f} %")
    lines += ["", "top symbols:"]
    for share, name in profile.symbols:
        lines.append(f"  {share:5.1f} %  {name[:100]}")
    lines.append(f"(perf data in {profile.file}: perf report -i it)")
    return lines
