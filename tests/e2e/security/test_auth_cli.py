"""`weft auth` and the client commands against a real `weft server --auth`
(SQLite): bootstrapping the first admin key, creating, listing and revoking
keys of each role, the one-line refusals of missing, malformed and revoked
keys and of calls outside a key's grant, the authenticated principal in
`weft history`, the audit line of a terminate in the server's log, and the
secure-by-default refusal of a TLS listener off loopback without
authentication.

What a test only sets up (keys it does not look at, runs) goes through the
SDK, in-process; what it checks goes through the `weft` command."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sdk import Client
from sdk.tls import TlsConfig
from tests.certs import Pki
from tests.cli.support import REPO, clean_env, error_line, eventually, ok, ok_json, run_all, show
from tests.e2e.security.conftest import server_tls_args
from tests.e2e.security.test_listen_refusal import refused, server
from tests.helpers import unique
from tests.serverproc import WEFT, ServerProcess, free_port

KEY = re.compile(r"^weft\.(k_[0-9a-f]{12})\.([A-Za-z0-9_-]{20,})$")
ROLES = ("admin", "worker", "starter", "signaler", "reader")


def command(
    words: str, *args: str, address: str | None = None, key: str | None = None
) -> list[str]:
    """`weft WORDS… [--address A] [--api-key K] ARGS…`."""
    out = [str(WEFT), *words.split()]
    if address is not None:
        out += ["--address", address]
    if key is not None:
        out += ["--api-key", key]
    return [*out, *args]


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**clean_env(), **(env or {})},
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def parts(key: str) -> tuple[str, str]:
    """(id, secret) of an API key as `weft` prints it."""
    found = KEY.match(key)
    assert found, f"not an API key: {key!r}"
    return found.group(1), found.group(2)


def key_id(key: str) -> str:
    return parts(key)[0]


def secret_of(key: str) -> str:
    return parts(key)[1]


@dataclass
class AuthServer:
    node: ServerProcess
    db_url: str
    admin_key: str
    first_bootstrap: subprocess.CompletedProcess[str]
    sdk: Client
    """An admin's client, for setting things up."""

    @property
    def address(self) -> str:
        return self.node.address

    @property
    def admin_id(self) -> str:
        return key_id(self.admin_key)

    def weft(
        self, words: str, *args: str, key: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run(command(words, *args, address=self.address, key=key))

    def admin(self, words: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.weft(words, *args, key=self.admin_key)

    def create(self, role: str, **grant: Any) -> tuple[str, str]:
        """A new key of `role` in "default": (id, key)."""
        return self.sdk.create_api_key(role, **grant)

    def credentials(self, include_revoked: bool = True) -> dict[str, Any]:
        return {c.id: c for c in self.sdk.list_credentials(include_revoked=include_revoked)}

    def start_idle(self, key: str) -> str:
        """A run on a task list no decider polls (it stays open); its workflow id."""
        workflow_id = unique("wf")
        # (a short identity: `weft history` cuts a long line, principal last)
        with Client(self.address, api_key=key, identity="t") as client:
            client.start_workflow("wt", workflow_id=workflow_id, task_list=unique("idle"))
        return workflow_id

    def status(self, workflow_id: str) -> str:
        return self.sdk.describe(workflow_id).info.status.lower()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    directory: Path = tmp_path_factory.mktemp("auth-cli")
    db_url = f"sqlite:///{directory / 'weft.db'}"
    node = ServerProcess(db_url, directory, name="auth", extra_args=("--auth",))
    try:
        asyncio.run(node.start())
        first = run(command("auth bootstrap", "--db", db_url))
        assert first.returncode == 0, show(first)
        admin_key = first.stdout.strip()
        with Client(node.address, api_key=admin_key) as client:
            yield AuthServer(node, db_url, admin_key, first, client)
    finally:
        node.stop()


# -- bootstrap ------------------------------------------------------------------------


def test_bootstrap_says_when_it_made_the_database(tmp_path: Path) -> None:
    """Before any server, as meant, or at a mistyped path: said either way."""
    path = tmp_path / "typo.db"
    done = run(command("auth bootstrap", "--db", f"sqlite:///{path}"))
    assert done.returncode == 0, show(done)
    assert done.stdout.startswith("weft.k_"), show(done)
    assert f"no database was at {path}: made a new one" in done.stderr, show(done)
    assert path.exists()


def test_bootstrap_once_then_only_with_force(auth_server: AuthServer) -> None:
    first = auth_server.first_bootstrap
    admin_id = key_id(auth_server.admin_key)
    assert first.stdout == auth_server.admin_key + "\n", show(first)  # the key, alone
    assert f"admin key {admin_id}" in first.stderr, show(first)
    assert "no database was at" not in first.stderr  # the server's, made before
    before = auth_server.credentials()
    assert (before[admin_id].grant.role, before[admin_id].grant.namespace) == ("admin", "*")

    again = run(command("auth bootstrap", "--db", auth_server.db_url))
    line = error_line(again, "auth bootstrap", 1)
    assert "an admin key is active already" in line and admin_id in line and "--force" in line
    assert again.stdout == ""
    assert auth_server.credentials().keys() == before.keys()

    forced = ok_json(
        run(command("auth bootstrap", "--db", auth_server.db_url, "--force", "--json"))
    )
    assert (forced["role"], forced["namespace"]) == ("admin", "*")
    assert key_id(forced["key"]) == forced["id"] != admin_id
    # The second admin key works through the server and sees both.
    shown = ok_json(auth_server.weft("auth key list", "--json", key=forced["key"]))
    ids = {c["id"] for c in shown["credentials"]}
    assert {admin_id, forced["id"]} <= ids, shown


# -- creating, listing, revoking --------------------------------------------------------


def test_key_create_for_each_role_and_list_never_shows_a_secret(
    auth_server: AuthServer,
) -> None:
    base = command("auth key create", address=auth_server.address, key=auth_server.admin_key)
    done = run_all(
        [
            *([*base, "--role", role] for role in ROLES),
            [*base, "--role", "worker", "--task-list", "tl-j", "--name", "j", "--json"],
        ]
    )
    made: dict[str, tuple[str, str]] = {}  # key -> (id, role)
    for role, result in zip(ROLES, done, strict=False):
        assert result.returncode == 0, show(result)
        key = result.stdout.strip()
        assert result.stdout == key + "\n", show(result)  # only the key on stdout
        kid = key_id(key)
        assert f"key {kid}: {role} in 'default'" in result.stderr, show(result)
        made[key] = (kid, role)
    doc = json.loads(ok(done[-1]))
    assert (doc["role"], doc["namespace"]) == ("worker", "default"), doc
    assert key_id(doc["key"]) == doc["id"], doc
    made[doc["key"]] = (doc["id"], "worker")
    assert len({kid for kid, _ in made.values()}) == len(ROLES) + 1

    listing, listing_json = (
        ok(result)
        for result in run_all(
            [
                command("auth key list", address=auth_server.address, key=auth_server.admin_key),
                command(
                    "auth key list",
                    "--json",
                    address=auth_server.address,
                    key=auth_server.admin_key,
                ),
            ]
        )
    )
    listed = {c["id"]: c for c in json.loads(listing_json)["credentials"]}
    rows = {line.split()[0]: line.split() for line in listing.splitlines()[1:]}
    for key, (kid, role) in made.items():
        assert (listed[kid]["role"], listed[kid]["namespace"]) == (role, "default")
        assert listed[kid]["revoked_at"] is None
        assert listed[kid]["created_by"] == f"key:{auth_server.admin_id}"
        assert role in rows[kid] and rows[kid][-1] == "active", listing
        for text in (listing, listing_json):
            assert secret_of(key) not in text, text
    assert listed[doc["id"]]["task_lists"] == ["tl-j"] and listed[doc["id"]]["name"] == "j"
    assert rows[doc["id"]][1] == "j" and "tl-j" in rows[doc["id"]], listing
    assert not any("secret" in field or "hash" in field for c in listed.values() for field in c)
    assert secret_of(auth_server.admin_key) not in listing + listing_json

    # Each key authenticates as its role: `weft list` is for starters, readers, admins.
    texts = [(key, kid, role) for key, (kid, role) in made.items() if key != doc["key"]]
    tried = run_all([command("list", address=auth_server.address, key=k) for k, _, _ in texts])
    for (_, kid, role), result in zip(texts, tried, strict=True):
        if role in ("admin", "starter", "reader"):
            ok(result)
        else:
            line = error_line(result, "list", 1)
            assert f"key:{kid} may not call ListWorkflows" in line, show(result)


def test_revoked_key_leaves_the_list_and_is_refused(auth_server: AuthServer) -> None:
    kid, key = auth_server.create("reader", name="to-revoke")
    with Client(auth_server.address, api_key=key) as reader:
        reader.list()  # it works (and the server remembers it)

    assert ok(auth_server.admin("auth key revoke", kid)) == f"revoked {kid}\n"
    active, everything, refusal, unknown = run_all(
        [
            command("auth key list", address=auth_server.address, key=auth_server.admin_key),
            command(
                "auth key list",
                "--include-revoked",
                address=auth_server.address,
                key=auth_server.admin_key,
            ),
            command("list", address=auth_server.address, key=key),
            command(
                "auth key revoke",
                "k_000000000000",
                address=auth_server.address,
                key=auth_server.admin_key,
            ),
        ]
    )
    assert kid not in ok(active)
    row = next(line.split() for line in ok(everything).splitlines() if line.startswith(kid))
    assert row[1] == "to-revoke" and row[-1] == "revoked", everything.stdout
    assert auth_server.credentials()[kid].HasField("revoked_at")
    assert kid not in auth_server.credentials(include_revoked=False)

    line = error_line(refusal, "list", 1)
    assert f"API key {kid} was revoked" in line
    assert secret_of(key) not in line
    assert "no credential 'k_000000000000'" in error_line(unknown, "auth key revoke", 3)


def test_bad_create_is_refused_in_one_line_and_changes_nothing(
    auth_server: AuthServer,
) -> None:
    before = auth_server.credentials()
    base = command("auth key create", address=auth_server.address, key=auth_server.admin_key)
    unknown, narrowed, everywhere = run_all(
        [
            [*base, "--role", "nobody"],
            [*base, "--role", "starter", "--task-list", "x"],
            [*base, "--role", "reader", "--namespace", "*"],
        ]
    )

    line = error_line(unknown, "auth key create", 2)  # a usage error, before any call
    assert "--role" in line and "nobody" in line
    assert unknown.stdout == ""

    line = error_line(narrowed, "auth key create", 2)  # INVALID_ARGUMENT from the server
    assert "grant.task_lists does not apply to role 'starter'" in line
    assert narrowed.stdout == ""

    line = error_line(everywhere, "auth key create", 2)
    assert "only an admin grant may be for every namespace" in line
    assert everywhere.stdout == ""

    assert auth_server.credentials() == before


# -- client commands and keys -----------------------------------------------------------


def test_client_commands_refuse_missing_and_bad_keys_in_one_line(
    auth_server: AuthServer,
) -> None:
    never = unique("never-started")
    without_key = {
        "list": (),
        "describe": ("wf-nowhere",),
        "history": ("wf-nowhere",),
        "start": (never, "--task-list", "tl"),
        "signal": ("wf-nowhere", "go"),
        "terminate": ("wf-nowhere",),
    }
    wrong_secret = f"weft.{auth_server.admin_id}.not-the-secret"
    bad_keys = {
        "garbage": "the API key is malformed",
        "weft.k_000000000000.whatever": "API key k_000000000000 is not valid",
        wrong_secret: f"API key {auth_server.admin_id} is not valid",
    }
    cases: list[tuple[str, tuple[str, ...], str | None]] = [
        (name, args, None) for name, args in without_key.items()
    ]
    cases += [("start", without_key["start"], key) for key in bad_keys]
    done = run_all(
        [command(name, *args, address=auth_server.address, key=key) for name, args, key in cases]
    )
    for (name, _, key), result in zip(cases, done, strict=True):
        line = error_line(result, name, 1)
        says = bad_keys[key] if key else "this server requires credentials: an API key"
        assert says in line, show(result)
        assert "not-the-secret" not in line
        assert result.stdout == ""
    # Nothing was started by the refused `weft start`s.
    assert not auth_server.sdk.list(workflow_type=never)


def test_workers_with_a_refused_key_exit_at_once_in_one_line(auth_server: AuthServer) -> None:
    # A setting to fix, not a server away: before, a runner polled into the
    # refusal without end, a log line per poll each second.
    roles = ("runner", "decider")
    args = ("--task-list", "tl", "examples.order")
    done = run_all(
        [command(role, *args, address=auth_server.address, key="garbage") for role in roles]
    )
    for role, result in zip(roles, done, strict=True):
        assert result.returncode == 1, show(result)
        assert "Traceback" not in result.stderr
        line = result.stderr.splitlines()[-1]  # after the process's own JSON log lines
        assert line.startswith(f"weft {role}: ") and "the API key is malformed" in line, show(
            result
        )
        assert '"poll.' not in result.stderr  # it never polled


def test_weft_api_key_variable_is_the_key(auth_server: AuthServer) -> None:
    _, key = auth_server.create("reader")
    listing = command("list", address=auth_server.address)
    ok(run(listing, env={"WEFT_API_KEY": key}))
    bad = run(listing, env={"WEFT_API_KEY": "garbage"})
    assert "malformed" in error_line(bad, "list", 1)


def test_signaler_limited_to_its_signal(auth_server: AuthServer) -> None:
    starter_id, starter = auth_server.create("starter")
    signaler_id, signaler = auth_server.create("signaler", signal_names=["approved"])
    workflow_id = auth_server.start_idle(starter)

    done = auth_server.weft("signal", workflow_id, "approved", "--input", '{"n": 1}', key=signaler)
    assert ok(done) == f"signaled {workflow_id}: approved\n"
    before = ok_json(auth_server.admin("history", workflow_id, "--json"))

    refusal = auth_server.weft("signal", workflow_id, "other", key=signaler)
    line = error_line(refusal, "signal", 1)
    assert f"key:{signaler_id} may not call SignalWorkflow" in line
    assert "'other'" in line and "approved" in line
    after, text = run_all(
        [
            command("history", workflow_id, "--json", address=auth_server.address, key=starter),
            command("history", workflow_id, address=auth_server.address, key=starter),
        ]
    )
    assert ok_json(after) == before

    events = before["events"]
    assert [e["type"] for e in events] == ["WorkflowStarted", "DeciderScheduled", "Signal"]
    assert events[0]["principal"] == f"key:{starter_id}", events[0]
    assert events[2]["principal"] == f"key:{signaler_id}", events[2]
    signal = events[2]["attributes"]
    assert (signal["signal_name"], signal["input"]) == ("approved", {"n": 1}), signal

    lines = {line.split()[2]: line for line in ok(text).splitlines()[1:]}
    assert f"principal=key:{starter_id}" in lines["WorkflowStarted"], text.stdout
    assert f"principal=key:{signaler_id}" in lines["Signal"], text.stdout


def log_entries(node: ServerProcess) -> list[dict[str, Any]]:
    """The server's JSON log lines (its stdout and stderr go to `node.log_path`)."""
    out = []
    for line in node.log_path.read_text(errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def test_terminate_is_audited_with_the_principal(auth_server: AuthServer) -> None:
    starter_id, starter = auth_server.create("starter")
    workflow_id = auth_server.start_idle(starter)

    line = error_line(auth_server.weft("terminate", workflow_id, key=starter), "terminate", 1)
    assert f"key:{starter_id} may not call TerminateWorkflow" in line
    assert auth_server.status(workflow_id) == "open"

    done = auth_server.admin("terminate", workflow_id, "--reason", "audited")
    assert ok(done) == f"terminated: {workflow_id}\n"
    assert auth_server.status(workflow_id) == "terminated"

    def audits() -> list[dict[str, Any]] | None:
        found = [
            e
            for e in log_entries(auth_server.node)
            if e.get("event") == "audit"
            and e.get("rpc") == "TerminateWorkflow"
            and e.get("workflow_id") == workflow_id
        ]
        return found if len(found) >= 2 else None

    found = eventually(audits, timeout=10)
    assert [(e["principal"], e["outcome"]) for e in found] == [
        (f"key:{starter_id}", "refused"),
        (f"key:{auth_server.admin_id}", "ok"),
    ], found
    assert all(e["namespace"] == "default" and e["peer"] for e in found), found
    # No secret is ever logged.
    log = auth_server.node.log_path.read_text(errors="replace")
    assert secret_of(auth_server.admin_key) not in log and secret_of(starter) not in log


# -- secure by default --------------------------------------------------------------------


def test_tls_off_loopback_without_authentication_is_refused(tmp_path: Path, pki: Pki) -> None:
    listen = f"0.0.0.0:{free_port()}"
    done = refused(server(tmp_path, "--listen", listen, *server_tls_args(pki, mutual=False)))
    line = error_line(done, "server", 2)
    assert f"refusing to start: --listen {listen} is not a loopback address" in line
    assert "authentication is off" in line and "--auth" in line
    assert not (tmp_path / "weft.db").exists()  # refused before anything was opened


async def test_tls_off_loopback_with_auth_serves_and_requires_keys(
    tmp_path: Path, pki: Pki
) -> None:
    db_url = f"sqlite:///{tmp_path / 'weft.db'}"
    node = ServerProcess(db_url, tmp_path, name="tls-auth", tls=TlsConfig(ca=pki.ca.path))
    node.extra_args = (
        "--listen",
        f"0.0.0.0:{node.port}",
        *server_tls_args(pki, mutual=False),
        "--auth",
    )
    await node.start()
    try:
        assert '"listen": "0.0.0.0:' in node.log_path.read_text()
        tls = ("--tls-ca", str(pki.ca.path))
        boot = await asyncio.to_thread(run, command("auth bootstrap", "--db", db_url))
        assert boot.returncode == 0, show(boot)
        key = boot.stdout.strip()
        without, with_key = await asyncio.to_thread(
            run_all,
            [
                command("list", *tls, address=node.address),
                command("list", *tls, address=node.address, key=key),
            ],
        )
        assert "requires credentials" in error_line(without, "list", 1)
        assert ok(with_key) == "no workflows\n"
    finally:
        node.stop()
