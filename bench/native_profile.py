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
from dataclasses import dataclass, field
from pathlib import Path

# What a shared object's name says it is; the first match wins.
PARTS = (
    ("libpython", "Python interpreter"),
    ("[kernel", "kernel"),
    ("cygrpc", "gRPC core"),
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


@dataclass
class NativeProfile:
    """Shares of the samples, in percent."""

    parts: dict[str, float] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)
    symbols: list[tuple[float, str]] = field(default_factory=list)
    file: str = ""


def perf_exe() -> str:
    exe = shutil.which("perf")
    if exe is None:
        raise SystemExit(
            "bench.hotpath: --perf needs Linux perf (Debian: apt-get install linux-perf)"
        )
    return exe


def start(pid: int, log_dir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    out = log_dir / "perf.data"
    proc = subprocess.Popen(
        [perf_exe(), "record", "-F", str(FREQUENCY), "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, out


def stop(recording: tuple[subprocess.Popen[bytes], Path]) -> NativeProfile:
    proc, out = recording
    proc.send_signal(signal.SIGINT)  # perf writes its file out and exits
    proc.wait(timeout=60)
    if not out.exists():
        raise SystemExit(f"bench.hotpath: perf recorded nothing (exit code {proc.returncode})")
    parts: dict[str, float] = {}
    for share, name in read_report(_report(out, "dso")):
        part = next((label for marker, label in PARTS if marker in name), "other")
        parts[part] = parts.get(part, 0.0) + share
    threads: dict[str, float] = {}
    for share, name in read_report(_report(out, "comm")):
        threads[name] = threads.get(name, 0.0) + share
    symbols = read_report(_report(out, "sym"))[:25]
    return NativeProfile(parts, threads, symbols, str(out))


def _report(data: Path, key: str) -> str:
    done = subprocess.run(
        [perf_exe(), "report", "-i", str(data), "--sort", key, "--stdio"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


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
    lines = ["", f"{process} CPU by native code (perf samples):"]
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
