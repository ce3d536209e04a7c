"""Step-language tests run on a real in-process server on a SQLite file; the
tests marked `both_databases` also run on PostgreSQL (the interpreter only
sees histories, so the database matters only end to end)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orchestrator.server import Server
from sdk import AsyncClient


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def client(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{server.port}", identity="steps-test") as c:
        yield c
