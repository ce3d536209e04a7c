"""On SQLite there is one node: a second `weft server` on the same file is
refused at its start.

Two nodes on one SQLite file would both lead the upkeep (the lease is taken,
not shared, on SQLite: `upkeep.leader`), so schedules would fire twice and the
purge and the reaper run twice at once, and neither would hear of the other's
tasks (there is no NOTIFY). So a node holds an exclusive POSIX lock (`lockf`)
on a file beside the database for its life: the kernel lets go of it when the
process ends, `kill -9` included, so a crash never leaves a stale lock; and,
unlike a `flock`, a child the node forks (an embedded activity's
`multiprocessing`) does not inherit it and keep it past the node. The lock is
on a file of its own, not the database: SQLite's own POSIX locks on the
database are the process's too, and closing any descriptor of a file drops
them all. Tools that open the database without serving it (`weft auth
bootstrap`, migrations) take no lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os


class NodeLockTaken(RuntimeError):
    """Another node serves this SQLite database."""


class SqliteNodeLock:
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, db_path: str) -> SqliteNodeLock:
        """Hold the node lock of `db_path`; NodeLockTaken if another process
        holds it, OSError (said with the lock file's name) if it cannot be made."""
        path = f"{db_path}-node.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise OSError(f"cannot make the node lock {path}: {exc.strerror}") from exc
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Who holds it, for the refusal below (the lock, not this text, counts).
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            taken = exc.errno in (errno.EACCES, errno.EAGAIN)
            try:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() if taken else ""
            finally:
                os.close(fd)
            if not taken:
                raise OSError(f"cannot lock {path}: {exc.strerror}") from exc
            by = f" (process {holder})" if holder.isdigit() else ""
            raise NodeLockTaken(
                f"another node serves {db_path}{by}: SQLite takes one node;"
                " point every node at PostgreSQL to run several"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # (closing the descriptor lets go of the lock)
