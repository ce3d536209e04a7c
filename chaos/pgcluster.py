"""A PostgreSQL cluster of the chaos run's own (Debian's `pg_createcluster`), the
only PostgreSQL it may crash and restart. A shared server (such as the one on
5432 that tests and other people use) is never stopped: with one, the run
makes a database of its own on it and leaves the server alone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from bench.processes import free_port

DATABASE = "weft_chaos"
PREFIX = "chaos-"


def why_not_own() -> str | None:
    """Why this machine cannot give the run a cluster of its own, or None."""
    missing = [
        tool
        for tool in ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
        if not shutil.which(tool)
    ]
    if missing:
        return f"no {', '.join(missing)} (Debian's postgresql-common)"
    if os.geteuid() != 0:
        return "creating a cluster needs root (pg_createcluster)"
    if not _versions():
        return "no PostgreSQL server installed under /usr/lib/postgresql"
    return None


def _versions() -> list[str]:
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return []
    found = [p.name for p in root.iterdir() if (p / "bin" / "postgres").exists()]
    return sorted(found, key=lambda v: [int(x) for x in re.findall(r"\d+", v)])


class OwnCluster:
    """`pg_createcluster VERSION chaos-… -p PORT`, trust auth on localhost, dropped
    at the end. `crash()` is `stop -m immediate` (no checkpoint: the restart
    replays the WAL, as after a power cut)."""

    def __init__(self) -> None:
        self.version = _versions()[-1]
        # The pid in the name lets a later run drop it if this one is killed.
        self.name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.port = free_port()
        self.created = False

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def create(self) -> None:
        self.created = True  # from here on, drop() must run even if this fails
        _run(
            "pg_createcluster",
            self.version,
            self.name,
            "-p",
            str(self.port),
            "--start",
            "--",
            "--auth=trust",
        )
        create_database(self.admin_url, DATABASE)

    def crash(self) -> None:
        _run("pg_ctlcluster", self.version, self.name, "stop", "-m", "immediate")

    def start(self) -> None:
        _run("pg_ctlcluster", self.version, self.name, "start")

    def drop(self) -> None:
        if self.created:
            _run("pg_dropcluster", "--stop", self.version, self.name)
            self.created = False


def drop_orphans() -> list[str]:
    """Drop the clusters left by chaos runs that were killed before they could
    (their process is gone); returns their names."""
    dropped = []
    for version in _versions():
        folder = Path("/etc/postgresql") / version
        names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
        for name in names:
            pid = name.removeprefix(PREFIX).split("-", 1)[0]
            if name.startswith(PREFIX) and pid.isdigit() and not _alive(int(pid)):
                _run("pg_dropcluster", "--stop", version, name)
                dropped.append(f"{version}/{name}")
    return dropped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def with_database(url: str, database: str) -> str:
    """The URL with its database replaced (user, password, host and options kept)."""
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def why_unreachable(url: str) -> str | None:
    """Why the run cannot make a database on this server, or None."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except (psycopg.Error, ValueError) as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    if not (row and row[0]):
        return "its user may not create databases"
    return None


def create_database(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def drop_database(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
