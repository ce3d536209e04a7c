"""Authentication by client certificate and by API key, against a real
`weft server --auth` serving mutual TLS on SQLite: the first admin key made
with `weft auth bootstrap` before the server starts; certificate principals
added over mTLS with it (matched by CN or by a SAN), what their grant lets them
do and what it refuses, their revocation taking effect at once; and the order
example's decider and runners over mTLS, each with a worker key of its own,
stamping their keys on the events they append."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.client import AsyncClient
from sdk.errors import NotFoundError, PermissionDeniedError, UnauthenticatedError
from sdk.sync_client import Client
from sdk.tls import TlsConfig
from tests.certs import Authority, Pair, Pki, issue
from tests.cli.support import REPO, argv, clean_env, ok_json, show
from tests.e2e.security.conftest import good_tls, server_tls_args
from tests.helpers import schedule, unique, wait_until
from tests.serverproc import WEFT, ServerProcess
from tests.workerproc import WorkerProcess

STARTER_CN = "weft-starter"
STRANGER_CN = "weft-stranger"
SAN_CN = "weft-san-holder"  # not a principal itself: only its SAN is
SAN_DNS = "orders-frontend.svc.weft.test"
PROBE_TYPE = "cert-probe"
PROBE_TASK_LIST = "probes"  # nobody decides it: the probes stay open


@dataclass(frozen=True)
class AuthNode:
    server: ServerProcess
    admin_key: str
    bootstrap: subprocess.CompletedProcess[str]
    certs: Path
    """Where the test's extra client certificates go."""

    @property
    def address(self) -> str:
        return self.server.address


def cert_tls(pki: Pki, pair: Pair) -> TlsConfig:
    return TlsConfig(ca=pki.ca.path, cert=pair.cert, key=pair.key)


def tls_flags(pki: Pki) -> list[str]:
    """The CLI's mutual TLS flags with the PKI's plain client certificate (CN
    "client", never a principal here: with it, only an API key gets in)."""
    return [
        "--tls-ca",
        str(pki.ca.path),
        "--tls-cert",
        str(pki.client.cert),
        "--tls-key",
        str(pki.client.key),
    ]


def weft(
    command: str, *args: str, address: str, api_key: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`weft COMMAND --address A ARGS…`; COMMAND may be words, e.g. "auth key list"."""
    env = clean_env()
    if api_key is not None:
        env["WEFT_API_KEY"] = api_key
    return subprocess.run(
        [str(WEFT), *command.split(), "--address", address, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def issue_with_san(ca: Authority, directory: Path, name: str, dns: str) -> Pair:
    """A client certificate whose CN is `name` and whose one SAN is DNS:`dns`."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pair


# -- the node, its admin, its principals ---------------------------------------------------


@pytest.fixture(scope="module")
def node(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthNode]:
    """`weft server --auth` with mutual TLS, its first admin key bootstrapped
    into the database before it started."""
    directory = tmp_path_factory.mktemp("auth-certs")
    db_url = f"sqlite:///{directory / 'weft.db'}"
    boot = subprocess.run(
        [str(WEFT), "auth", "bootstrap", "--db", db_url],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert boot.returncode == 0, show(boot)
    server = ServerProcess(
        db_url,
        directory,
        name="auth",
        extra_args=(*server_tls_args(pki), "--auth"),
        tls=good_tls(pki),
    )
    certs = directory / "certs"
    certs.mkdir()
    try:
        asyncio.run(server.start())
        yield AuthNode(server, boot.stdout.strip(), boot, certs)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def admin(node: AuthNode, pki: Pki) -> Iterator[Client]:
    """The bootstrapped admin key, over mTLS with the plain client certificate."""
    with Client(node.address, tls=good_tls(pki), api_key=node.admin_key) as client:
        yield client


@pytest.fixture(scope="module")
def starter(node: AuthNode, pki: Pki) -> tuple[Pair, str]:
    """A client certificate (CN weft-starter) added as a `starter` of `default`
    with `weft auth principal add` over mTLS and the admin key; (pair, id)."""
    pair = issue(pki.ca, node.certs, STARTER_CN, server=False)
    done = weft(
        "auth principal add",
        STARTER_CN,
        "--role",
        "starter",
        "--namespace",
        "default",
        "--json",
        *tls_flags(pki),
        address=node.address,
        api_key=node.admin_key,
    )
    doc = ok_json(done)
    assert doc["subject"] == STARTER_CN and doc["role"] == "starter", doc
    return pair, str(doc["id"])


@pytest.fixture(scope="module")
def stranger(node: AuthNode, pki: Pki) -> Pair:
    """Issued by the server's client CA (the handshake passes), never a principal."""
    return issue(pki.ca, node.certs, STRANGER_CN, server=False)


def probe(client: Client, workflow_id: str | None = None) -> str:
    """Start a run nobody decides; its workflow id."""
    run = client.start_workflow(
        PROBE_TYPE, {"probe": True}, workflow_id=workflow_id, task_list=PROBE_TASK_LIST
    )
    return run.workflow_id


# -- bootstrap and adding a principal ------------------------------------------------------


def test_bootstrap_prints_one_admin_key_that_the_server_accepts(
    node: AuthNode, pki: Pki, admin: Client
) -> None:
    assert node.bootstrap.stdout.count("\n") == 1, show(node.bootstrap)
    assert node.admin_key.startswith("weft.k_"), show(node.bootstrap)
    keys = ok_json(
        weft(
            "auth key list",
            "--json",
            *tls_flags(pki),
            address=node.address,
            api_key=node.admin_key,
        )
    )["credentials"]
    boot = [k for k in keys if k["created_by"] == "weft auth bootstrap"]
    assert len(boot) == 1, keys
    assert (boot[0]["role"], boot[0]["namespace"], boot[0]["kind"]) == ("admin", "*", "key")
    assert boot[0]["id"] in node.bootstrap.stderr, show(node.bootstrap)
    # Without a key, the same (CA-issued, but not a principal) certificate gets nothing.
    with Client(node.address, tls=good_tls(pki)) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.list_credentials()


def test_the_principal_added_over_mtls_is_listed_as_the_admin_made_it(
    node: AuthNode, pki: Pki, admin: Client, starter: tuple[Pair, str]
) -> None:
    _, principal_id = starter
    shown = ok_json(
        weft(
            "auth principal list",
            "--json",
            *tls_flags(pki),
            address=node.address,
            api_key=node.admin_key,
        )
    )["credentials"]
    mine = [p for p in shown if p["id"] == principal_id]
    assert len(mine) == 1, shown
    p = mine[0]
    assert (p["kind"], p["subject"], p["role"], p["namespace"]) == (
        "certificate",
        STARTER_CN,
        "starter",
        "default",
    )
    assert p["revoked_at"] is None
    boot_id = next(c.id for c in admin.list_credentials() if c.created_by == "weft auth bootstrap")
    assert p["created_by"] == f"key:{boot_id}"


# -- what the certificate alone may do -----------------------------------------------------


def test_the_certificate_alone_starts_a_workflow_as_its_principal(
    node: AuthNode, pki: Pki, admin: Client, starter: tuple[Pair, str]
) -> None:
    pair, _ = starter
    with Client(node.address, tls=cert_tls(pki, pair)) as client:
        assert client.aio.api_key is None
        workflow_id = probe(client)
        # A starter reads the runs it starts.
        assert client.describe(workflow_id).status == "open"
        events = client.history(workflow_id)
    assert events[0].type == "WorkflowStarted"
    assert events[0].principal == f"certificate:{STARTER_CN}"
    # The admin sees the same stamp (it is stored, not made up per reader).
    first = admin.history(workflow_id)[0]
    assert (first.type, first.principal) == ("WorkflowStarted", f"certificate:{STARTER_CN}")


def test_the_certificate_may_not_terminate(
    node: AuthNode, pki: Pki, admin: Client, starter: tuple[Pair, str]
) -> None:
    pair, _ = starter
    with Client(node.address, tls=cert_tls(pki, pair)) as client:
        workflow_id = probe(client)
        before = admin.history(workflow_id)
        with pytest.raises(PermissionDeniedError) as refused:
            client.terminate(workflow_id, reason="not mine to end")
        # A call the role has, next to the refused one, still works.
        client.signal(workflow_id, "poke", {"n": 1})
    assert "TerminateWorkflow" in str(refused.value), refused.value
    assert f"certificate:{STARTER_CN}" in str(refused.value), refused.value
    after = admin.history(workflow_id)
    assert [e.type for e in after] == [e.type for e in before] + ["Signal"], after
    assert after[-1].principal == f"certificate:{STARTER_CN}"
    assert admin.describe(workflow_id).status == "open"


def test_a_certificate_that_is_not_a_principal_is_unauthenticated_and_appends_nothing(
    node: AuthNode, pki: Pki, admin: Client, starter: tuple[Pair, str], stranger: Pair
) -> None:
    existing = probe(admin)
    before = admin.history(existing)
    wanted = unique("stranger-run")
    with Client(node.address, tls=cert_tls(pki, stranger)) as client:
        started = time.monotonic()
        with pytest.raises(UnauthenticatedError) as refused:
            probe(client, workflow_id=wanted)
        assert time.monotonic() - started < 5, "an UNAUTHENTICATED call is not retried"
        with pytest.raises(UnauthenticatedError):
            client.signal(existing, "poke", {"from": "stranger"})
        with pytest.raises(UnauthenticatedError):
            client.describe(existing)
    assert STRANGER_CN in str(refused.value), refused.value
    assert admin.list(workflow_id=wanted) == []
    with pytest.raises(NotFoundError):
        admin.describe(wanted)
    assert admin.history(existing) == before


def test_a_principal_matches_a_subject_alternative_name(
    node: AuthNode, pki: Pki, admin: Client
) -> None:
    pair = issue_with_san(pki.ca, node.certs, SAN_CN, SAN_DNS)
    with Client(node.address, tls=cert_tls(pki, pair)) as client:
        with pytest.raises(UnauthenticatedError):
            probe(client)  # neither its CN nor its SAN is a principal yet
        principal_id = admin.add_principal(SAN_DNS, "starter", namespace="default")
        try:
            workflow_id = probe(client)  # at once: the refusal was not kept
            events = client.history(workflow_id)
        finally:
            admin.revoke_credential(principal_id)
    assert events[0].principal == f"certificate:{SAN_DNS}"


def test_a_revoked_principal_is_refused_at_once(
    node: AuthNode, pki: Pki, admin: Client, starter: tuple[Pair, str]
) -> None:
    """Revoked through the node that serves it: refused on the next call, though
    the node had just looked the certificate up (and kept what it found)."""
    name = "weft-revoked"
    pair = issue(pki.ca, node.certs, name, server=False)
    principal_id = admin.add_principal(name, "starter", namespace="default")
    with Client(node.address, tls=cert_tls(pki, pair)) as client:
        workflow_id = probe(client)
        assert client.describe(workflow_id).status == "open"
        admin.revoke_credential(principal_id)
        with pytest.raises(UnauthenticatedError) as refused:
            client.describe(workflow_id)
        with pytest.raises(UnauthenticatedError):
            probe(client)
    assert "revoked" in str(refused.value), refused.value
    listed = {c.id: c for c in admin.list_credentials(include_revoked=True)}
    assert listed[principal_id].HasField("revoked_at")
    assert principal_id not in {c.id for c in admin.list_credentials()}
    # Another principal of the same role is untouched.
    with Client(node.address, tls=cert_tls(pki, starter[0])) as other:
        assert other.describe(workflow_id).status == "open"


# -- the order example with worker keys ----------------------------------------------------


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


def create_key(node: AuthNode, pki: Pki, role: str, *narrowing: str) -> tuple[str, str]:
    """`weft auth key create` with the admin key; (id, key)."""
    doc = ok_json(
        weft(
            "auth key create",
            "--role",
            role,
            *narrowing,
            "--json",
            *tls_flags(pki),
            address=node.address,
            api_key=node.admin_key,
        )
    )
    assert doc["role"] == role and doc["key"].startswith("weft.k_"), doc
    return str(doc["id"]), str(doc["key"])


async def test_the_order_example_with_worker_keys_over_mtls(
    node: AuthNode, pki: Pki, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    decider_id, decider_key = create_key(node, pki, "worker", "--name", "decider")
    orders_id, orders_key = create_key(node, pki, "worker", "--task-list", "orders")
    pci_id, pci_key = create_key(node, pki, "worker", "--task-list", "pci")
    starter_id, starter_key = create_key(node, pki, "starter")
    flags = tls_flags(pki)
    for kind, name, key, args in (
        ("decider", "decider", decider_key, ["examples.order"]),
        ("runner", "runner-orders", orders_key, ["--task-list", "orders", "examples.order"]),
        ("runner", "runner-pci", pci_key, ["--task-list", "pci", "examples.order"]),
    ):
        env = {"WEFT_API_KEY": key}
        workers.append(
            WorkerProcess(kind, [*flags, *args], node.address, tmp_path, name, env).start()
        )

    async def registered() -> bool:
        for worker in workers:
            assert worker.running, worker.log_tail()
        return '"event": "decider.registered"' in workers[0].log() and all(
            '"event": "worker.started"' in w.log() for w in workers
        )

    await wait_until(registered, timeout=30)
    workflow_id = unique("order")
    order = {"sku": "book", "quantity": 1, "amount": 3}
    env = {**clean_env(), "WEFT_API_KEY": starter_key}
    waiting = subprocess.Popen(
        argv(
            "start",
            node.address,
            *flags,
            "order",
            "--id",
            workflow_id,
            "--input",
            json.dumps(order),
            "--wait",
            "--timeout",
            "45s",
            "--json",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        async with AsyncClient(node.address, tls=good_tls(pki), api_key=starter_key) as client:

            async def exists() -> bool:
                assert waiting.poll() is None, waiting.communicate()
                return bool(await client.list(workflow_id=workflow_id))

            await wait_until(exists, timeout=20)
            await client.signal(workflow_id, "delivered", {"to": "porch"})
            out, err = await asyncio.to_thread(waiting.communicate, timeout=50)
            events = await client.history(workflow_id)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 0, (out, err, [w.log_tail() for w in workers])
    doc: dict[str, Any] = json.loads(out)
    assert doc["status"] == "completed", doc
    assert doc["result"]["charge"].startswith("CH-"), doc

    by_type: dict[str, list[str]] = {}
    for event in events:
        by_type.setdefault(event.type, []).append(event.principal)
    assert by_type["WorkflowStarted"] == [f"key:{starter_id}"]
    assert by_type["Signal"] == [f"key:{starter_id}"]
    assert set(by_type["ActivityScheduled"]) == {f"key:{decider_id}"}
    assert set(by_type["DeciderCompleted"]) == {f"key:{decider_id}"}
    # The decider took its tasks and the runners theirs, each by its own key
    # (also when a task is handed to a poll already waiting, in another call's write).
    assert set(by_type["DeciderStarted"]) == {f"key:{decider_id}"}, by_type
    scheduled: dict[int, str] = {
        e.event_id: e.get("activity_type", {}).get("name", "") for e in events
    }
    ran: dict[str, set[tuple[str, str, str]]] = {}
    for event in events:
        if event.type in ("ActivityStarted", "ActivitySuccess"):
            activity = scheduled.get(event.get("scheduled_event_id"), "")
            ran.setdefault(activity, set()).add(
                (event.type, event.get("identity"), event.principal)
            )
    everything = [(e.event_id, e.type, e.principal, e.get("identity")) for e in events]
    orders = {
        ("ActivityStarted", "runner-orders", f"key:{orders_id}"),
        ("ActivitySuccess", "runner-orders", f"key:{orders_id}"),
    }
    pci = {
        ("ActivityStarted", "runner-pci", f"key:{pci_id}"),
        ("ActivitySuccess", "runner-pci", f"key:{pci_id}"),
    }
    assert ran == {"reserve-stock": orders, "ship": orders, "charge-card": pci}, everything


async def test_a_task_handed_to_a_waiting_poll_is_stamped_with_the_pollers_key(
    node: AuthNode, pki: Pki
) -> None:
    """Deterministic: the poll is parked before the task exists, so the write
    that makes the task hands it over. The event must name who took the task."""
    tls = good_tls(pki)
    with Client(node.address, tls=tls, api_key=node.admin_key) as admin:
        decider_id, decider_key = admin.create_api_key("worker", namespace="default")
        runner_id, runner_key = admin.create_api_key("worker", namespace="default")
        starter_id, starter_key = admin.create_api_key("starter", namespace="default")
    decisions, activities = unique("handover-d"), unique("handover-a")
    async with (
        AsyncClient(node.address, tls=tls, api_key=node.admin_key) as admin_aio,
        AsyncClient(node.address, tls=tls, api_key=decider_key) as decider,
        AsyncClient(node.address, tls=tls, api_key=runner_key) as runner,
        AsyncClient(node.address, tls=tls, api_key=starter_key) as starter,
    ):

        async def parked(task_list: str, kind: c.TaskListKind.ValueType, identity: str) -> None:
            async def seen() -> bool:
                request = s.DescribeTaskListRequest(
                    namespace="default", task_list=task_list, kind=kind
                )
                resp = await admin_aio.rpc("DescribeTaskList", request)
                return any(p.identity == identity for p in resp.pollers)

            await wait_until(seen, timeout=10)
            await asyncio.sleep(0.3)  # past its look at the (empty) list: waiting

        decision_poll = asyncio.create_task(
            decider.rpc(
                "PollForDecisionTask",
                s.PollForDecisionTaskRequest(
                    namespace="default", task_list=decisions, identity="handover-decider"
                ),
            )
        )
        await parked(decisions, c.TASK_LIST_KIND_DECISION, "handover-decider")
        run = await starter.start_workflow(PROBE_TYPE, {}, task_list=decisions)
        task = await decision_poll
        assert task.task_token, "the parked decision poll got no task"

        activity_poll = asyncio.create_task(
            runner.rpc(
                "PollForActivityTask",
                s.PollForActivityTaskRequest(
                    namespace="default", task_list=activities, identity="handover-runner"
                ),
            )
        )
        await parked(activities, c.TASK_LIST_KIND_ACTIVITY, "handover-runner")
        await decider.rpc(
            "RespondDecisionTaskCompleted",
            s.RespondDecisionTaskCompletedRequest(
                task_token=task.task_token,
                decisions=[schedule("a1", "probe-activity", activities, start_to_close=30)],
                identity="handover-decider",
            ),
        )
        assert (await activity_poll).task_token, "the parked activity poll got no task"
        events = await admin_aio.history(run.workflow_id)
    stamps = {e.type: (e.get("identity"), e.principal) for e in events}
    assert stamps["WorkflowStarted"][1] == f"key:{starter_id}"
    assert stamps["DeciderStarted"] == ("handover-decider", f"key:{decider_id}"), events
    assert stamps["ActivityStarted"] == ("handover-runner", f"key:{runner_id}"), events


def test_a_worker_key_narrowed_to_pci_may_not_poll_orders(
    node: AuthNode, pki: Pki, admin: Client
) -> None:
    key_id, key = admin.create_api_key("worker", namespace="default", task_lists=["pci"])
    with Client(node.address, tls=good_tls(pki), api_key=key) as client:

        def poll(task_list: str) -> Any:
            request = s.PollForActivityTaskRequest(
                namespace="default", task_list=task_list, identity="narrowed-probe"
            )
            return client.run(client.aio.rpc("PollForActivityTask", request))

        with pytest.raises(PermissionDeniedError) as refused:
            poll("orders")
        with pytest.raises(PermissionDeniedError):
            client.run(
                client.aio.rpc(
                    "DescribeTaskList",
                    s.DescribeTaskListRequest(namespace="default", task_list="orders"),
                )
            )
        poll("pci")  # its own task list: a long poll that ends empty (nothing is queued)
    assert f"key:{key_id}" in str(refused.value), refused.value
    assert "orders" in str(refused.value) and "pci" in str(refused.value), refused.value
