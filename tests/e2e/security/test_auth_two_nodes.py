"""Credentials across nodes: two `weft server --auth` processes on one
PostgreSQL database. A key made through one node works on the other at once;
a key revoked through one node is refused by the other within seconds (the
`credentials` change notice), though that node had just let it in and
remembers credentials for up to 30 s; and an expired key is refused by both.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sdk import AsyncClient
from sdk.errors import UnauthenticatedError
from tests.cli.support import REPO, clean_env, show
from tests.serverproc import WEFT, ServerProcess

pytestmark = pytest.mark.postgres

REVOKE_BOUND = 5.0  # seconds for a revocation to reach the other node
POLL_EVERY = 0.1
LIFETIME = timedelta(seconds=3)  # of the expiring key: long enough to use it first


@pytest.fixture
async def nodes(postgres_url: str, tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, ...]]:
    a = ServerProcess(postgres_url, tmp_path, name="node-a", extra_args=("--auth",))
    b = ServerProcess(postgres_url, tmp_path, name="node-b", extra_args=("--auth",))
    try:
        await asyncio.gather(a.start(), b.start())
        yield a, b
    finally:
        a.stop()
        b.stop()


async def bootstrap(db_url: str) -> str:
    """The first admin key, made by `weft auth bootstrap --db` on the database."""
    done = await asyncio.to_thread(
        subprocess.run,
        [str(WEFT), "auth", "bootstrap", "--db", db_url],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, show(done)
    return done.stdout.strip()


async def refused_within(
    call: Callable[[], Awaitable[object]], bound: float
) -> tuple[float, UnauthenticatedError]:
    """Make `call` every POLL_EVERY seconds until it raises UNAUTHENTICATED;
    (seconds it took, the error). Fails if it still works after `bound`."""
    t0 = time.monotonic()
    while True:
        try:
            await call()
        except UnauthenticatedError as exc:
            return time.monotonic() - t0, exc
        waited = time.monotonic() - t0
        assert waited < bound, f"still let in {waited:.2f}s later (bound {bound}s)"
        await asyncio.sleep(POLL_EVERY)


async def test_key_revoked_on_a_is_refused_on_b_within_seconds(
    nodes: tuple[ServerProcess, ...], postgres_url: str
) -> None:
    node_a, node_b = nodes
    admin_key = await bootstrap(postgres_url)
    async with (
        AsyncClient(node_a.address, api_key=admin_key) as admin_a,
        AsyncClient(node_b.address, api_key=admin_key) as admin_b,
    ):
        key_id, key = await admin_a.create_api_key("starter", name="two-nodes")
        async with (
            AsyncClient(node_a.address, api_key=key) as starter_a,
            AsyncClient(node_b.address, api_key=key) as starter_b,
        ):
            # Made on A, it works on B at once; B now remembers it.
            run = await starter_b.start_workflow("wt", task_list="idle", workflow_id="wf-two")
            assert [w.workflow_id for w in await starter_b.list()] == ["wf-two"]
            assert (await starter_b.describe("wf-two")).info.run_id == run.run_id
            await starter_a.list()

            await admin_a.revoke_credential(key_id)
            t0 = time.monotonic()
            # The revoking node refuses it at once.
            with pytest.raises(UnauthenticatedError, match=f"API key {key_id} was revoked"):
                await starter_a.list()
            took, refusal = await refused_within(starter_b.list, REVOKE_BOUND)
            took_since_revoke = time.monotonic() - t0
            print(f"revoked on A: refused on B after {took_since_revoke * 1000:.0f} ms")
            assert f"API key {key_id} was revoked" in refusal.message, refusal.message
            assert took < REVOKE_BOUND, f"node B refused the revoked key only after {took:.2f}s"
            # Every call, not only the one remembered: B refuses a start too.
            with pytest.raises(UnauthenticatedError):
                await starter_b.start_workflow("wt", task_list="idle")
            # Both nodes list it as revoked; the admin key itself still works on B.
            for admin in (admin_a, admin_b):
                found = {c.id: c for c in await admin.list_credentials(include_revoked=True)}
                assert found[key_id].HasField("revoked_at"), found[key_id]
            assert [w.workflow_id for w in await admin_b.list()] == ["wf-two"]


async def test_expired_key_is_refused_on_both_nodes(
    nodes: tuple[ServerProcess, ...], postgres_url: str
) -> None:
    node_a, node_b = nodes
    admin_key = await bootstrap(postgres_url)
    async with AsyncClient(node_a.address, api_key=admin_key) as admin:
        key_id, key = await admin.create_api_key("reader", expires_after=LIFETIME)
        expires = next(
            c.expires_at.ToDatetime(tzinfo=UTC)
            for c in await admin.list_credentials()
            if c.id == key_id
        )
        assert timedelta(0) < expires - datetime.now(UTC) <= LIFETIME, expires
    async with (
        AsyncClient(node_a.address, api_key=key) as on_a,
        AsyncClient(node_b.address, api_key=key) as on_b,
    ):
        # Good until it expires (and remembered by both nodes meanwhile).
        assert await on_a.list() == [] and await on_b.list() == []
        for node, client in (("A", on_a), ("B", on_b)):
            took, refusal = await refused_within(
                client.list, LIFETIME.total_seconds() + REVOKE_BOUND
            )
            refused_at = datetime.now(UTC)
            print(f"node {node} refused the expired key {took * 1000:.0f} ms after the check")
            assert f"API key {key_id} has expired" in refusal.message, refusal.message
            assert "expired" in refusal.message
            # Not before its time: the refusal came after the expiry.
            assert refused_at >= expires, (refused_at, expires)
        with pytest.raises(UnauthenticatedError, match="expired"):
            await on_a.describe_namespace("default")
        with pytest.raises(UnauthenticatedError, match="expired"):
            await on_b.describe_namespace("default")
