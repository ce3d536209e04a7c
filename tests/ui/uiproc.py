"""`weft ui` as a real subprocess on a free port, next to `ServerProcess`.

The process handling itself (spawn, readiness wait, stop) is the bench's
(`bench.processes`), as it is for `ServerProcess` and `WorkerProcess`."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

from bench import processes
from tests.serverproc import WEFT, free_port


class UiProcess:
    def __init__(
        self,
        server_address: str,
        log_dir: Path,
        *,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        https_ca: Path | None = None,
    ) -> None:
        self.server_address = server_address
        self.port = free_port()
        self.log_path = log_dir / f"ui-{self.port}.log"
        self.extra_args = extra_args
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.https_ca = https_ca
        """The CA that signed the UI's HTTPS certificate, when it serves HTTPS."""

    @property
    def url(self) -> str:
        scheme = "https" if self.https_ca else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.https_ca)) if self.https_ca else None

    def start(self, timeout: float = 20.0) -> UiProcess:
        """Spawn `weft ui` and return once it serves its stylesheet."""
        self.proc = processes.spawn(
            [
                str(WEFT),
                "ui",
                "--address",
                self.server_address,
                "--listen",
                f"127.0.0.1:{self.port}",
                *self.extra_args,
            ],
            self.log_path,
            cwd=None,
            env=self.extra_env,
        )
        ready = self.url + "/static/weft.css"
        if not processes.wait_http(ready, self._check_alive, timeout, self.ssl_context()):
            raise AssertionError(f"weft ui not serving within {timeout}s\n{self.log_tail()}")
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        processes.stop(self.proc, timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        return processes.log_tail(self.log_path, lines)

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            raise AssertionError(f"weft ui exited with code {code}\n{self.log_tail()}")
