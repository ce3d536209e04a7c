"""Shared fixtures: real databases (a SQLite file, a PostgreSQL database per
test), a real gRPC server in-process, and a client stub."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from sqlalchemy import create_engine, text

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from orchestrator.store import migrate
from sdk.api.weft.v1 import service_pb2_grpc as sg

# Unique per test session: concurrent sessions on one server must not share it.
TEMPLATE_DB = f"weft_test_template_{uuid.uuid4().hex[:8]}"


def _engine_listens(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _docker_postgres() -> str | None:
    if not os.environ.get("DOCKER_HOST") and not _engine_listens("/var/run/docker.sock"):
        # Without an engine the docker client leaks its half-made socket, and the
        # warning lands in whichever test the garbage collector runs in.
        return None
    try:
        import docker

        with docker.from_env() as engine:
            engine.ping()
    except Exception:
        return None
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer("postgres:16", driver="psycopg")
    container.start()
    return str(container.get_connection_url()).replace("postgresql+psycopg", "postgresql")


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server: WEFT_TEST_POSTGRES_URL, else testcontainers, else skip."""
    url = os.environ.get("WEFT_TEST_POSTGRES_URL") or _docker_postgres()
    if not url:
        reason = "no PostgreSQL: set WEFT_TEST_POSTGRES_URL or run a Docker engine"
        if os.environ.get("WEFT_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason + " (WEFT_REQUIRE_POSTGRES=1)")
        pytest.skip(reason)
    engine = create_engine(migrate.sync_url(url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{TEMPLATE_DB}"'))
    migrate.upgrade(_with_db(url, TEMPLATE_DB))
    yield url
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
    engine.dispose()


def _with_db(url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test (copied from a template)."""
    name = f"weft_t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(migrate.sync_url(postgres_admin_url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"'))
        yield _with_db(postgres_admin_url, name)
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/weft.db"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Every test that takes this runs on both databases."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def server_config(db_url: str) -> ServerConfig:
    return ServerConfig(db_url=db_url, listen="127.0.0.1:0", long_poll=3.0, drain_grace=1.0)


@pytest.fixture
async def server(server_config: ServerConfig) -> AsyncIterator[Server]:
    node = Server(server_config)
    await node.start()
    yield node
    await node.stop(grace=0.5)


@pytest.fixture
async def stub(server: Server) -> AsyncIterator[sg.WorkflowServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield sg.WorkflowServiceStub(channel)
