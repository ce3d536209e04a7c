"""`weft ui` as a real subprocess on a free port, next to `ServerProcess`."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

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
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
        env.update(self.extra_env)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(WEFT),
                    "ui",
                    "--address",
                    self.server_address,
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    *self.extra_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"weft ui exited\n{self.log_tail()}"
            try:
                with urllib.request.urlopen(
                    self.url + "/static/weft.css", timeout=1, context=self.ssl_context()
                ):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"weft ui not serving\n{self.log_tail()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
