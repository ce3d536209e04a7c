"""Step-language tests run on a real in-process server on a SQLite file; the
tests marked `both_databases` also run on PostgreSQL (the interpreter only
sees histories, so the database matters only end to end)."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from orchestrator.server import Server
from sdk import AsyncClient
from tests.helpers import QuietHTTPServer


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def client(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{server.port}", identity="steps-test") as c:
        yield c


class _Echo(BaseHTTPRequestHandler):
    """Answers `/echo` with the request as JSON; anything else is a 404."""

    def do_GET(self) -> None:
        self._answer(None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(json.loads(self.rfile.read(length) or b"null"))

    def _answer(self, body: object) -> None:
        if self.path != "/echo":
            self.send_error(404)
            return
        data = json.dumps({"method": self.command, "path": self.path, "body": body}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output to the test's own


@pytest.fixture
def http_server() -> Iterator[str]:
    """A real HTTP server on a free local port, for the `http` step."""
    server = QuietHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
