"""The web UI's parts without a server: sessions, clients, the history cache,
what the run page counts, and the page every unexpected failure gets."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from sdk.errors import (
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from sdk.events import Event
from webui import service
from webui.app import create_app
from webui.config import UiConfig
from webui.context import http_status
from webui.segments import NameConvertor, NamePathConvertor, segment
from webui.service import HistoryCache, events_bytes
from webui.sessions import COOKIE, MAX_PER_KEY, SessionStore
from webui.summary import activity_attempts

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def event(event_id: int, kind: str, **attributes: Any) -> Event:
    return Event(event_id, kind, T0 + timedelta(seconds=event_id), attributes)


def test_anonymous_traffic_never_evicts_a_logged_in_session() -> None:
    store = SessionStore(idle_seconds=3600, max_sessions=3, max_anonymous=5)
    person = store.login(store.new(), "weft.k_000000000000.secret", "k_000000000000")
    for _ in range(1000):
        store.new()
    assert store.get(person.sid) is person and len(store) == 6


def test_polling_does_not_keep_a_session_alive() -> None:
    store = SessionStore(idle_seconds=3600, max_sessions=3)
    session = store.new()
    seen = session.last_seen
    assert store.get(session.sid, touch=False) is session and session.last_seen == seen
    session.last_seen -= 3601
    assert store.get(session.sid, touch=False) is None


class FakeClient:
    closed: list[FakeClient] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.namespace = kwargs["namespace"]

    async def close(self) -> None:
        FakeClient.closed.append(self)


def test_random_namespaces_close_no_client_under_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "AsyncClient", FakeClient)
    FakeClient.closed = []
    clients = service.Clients(UiConfig())

    async def scenario() -> None:
        mine = clients.lease("weft.k_1.a", "default")  # a person's call, in flight
        anonymous = clients.lease(None, "default")  # an anonymous call, in flight
        idle = []
        for i in range(200):
            lease = clients.lease(None, f"random-{i}")
            clients.release(lease)
            idle.append(lease)
        assert clients.lease("weft.k_1.a", "default") is mine  # never evicted by others
        await clients.settle()
        assert anonymous.client not in FakeClient.closed  # evicted, but still in use
        # Evicted while idle: closed at once, not left open.
        evicted = [le for le in idle if le.retired]
        assert len(evicted) == 200 - service.CLIENTS_PER_KEY
        assert all(le.client in FakeClient.closed for le in evicted)
        assert not any(le.client in FakeClient.closed for le in idle if not le.retired)
        clients.release(anonymous)
        await clients.settle()
        assert anonymous.client in FakeClient.closed  # closed after its last call
        assert len(clients) <= service.CLIENTS_PER_KEY + 1
        assert len(FakeClient.closed) == len(evicted) + 1

    asyncio.run(scenario())


def test_the_history_cache_is_bounded_in_bytes() -> None:
    small = [event(i, "Signal", input="x" * 100) for i in range(1, 11)]
    big = [event(i, "Signal", input="x" * 10_000) for i in range(1, 11)]
    size = events_bytes(small)
    cache = HistoryCache(max_runs=10, max_bytes=size * 2, max_run_bytes=size * 2)
    assert not cache.put(("ns", "big", "r"), big, big) and not cache.holds(("ns", "big", "r"))
    for name in ("a", "b", "c"):
        assert cache.put(("ns", name, "r"), small, small)
    assert not cache.holds(("ns", "a", "r")) and cache.size == size * 2
    grown = [*small, event(11, "Signal", input="y")]
    cache.put(("ns", "c", "r"), grown, grown[-1:])
    # Only the new event is measured; the older run goes to make room.
    assert cache.size == size + events_bytes(grown[-1:]) and not cache.holds(("ns", "b", "r"))


def test_attempts_and_last_failure_of_an_activity() -> None:
    events = [
        event(1, "ActivityScheduled", activity_id="pay"),
        event(2, "ActivityStarted", scheduled_event_id=1),
        event(3, "ActivityFailed", scheduled_event_id=1, reason="card declined"),
        event(4, "ActivityScheduled", activity_id="pay"),
        event(5, "ActivityTimedOut", scheduled_event_id=4, timeout_type="START_TO_CLOSE"),
        event(6, "ActivityScheduled", activity_id="pay"),
        event(7, "ActivityScheduled", activity_id="ship"),
    ]
    found = activity_attempts(events)
    assert found["pay"].count == 3
    assert found["pay"].last_failure == "ActivityTimedOut START_TO_CLOSE"
    assert found["ship"].count == 1 and found["ship"].last_failure == ""


def test_service_errors_map_to_http_statuses() -> None:
    assert http_status(InvalidArgumentError("x")) == 400
    assert http_status(PermissionDeniedError("x")) == 403
    assert http_status(NotFoundError("x")) == 404
    assert http_status(UnavailableError("x")) == 503
    assert http_status(InternalError("x")) == 502


async def _call(
    app: Any, path: str, headers: dict[str, str] | None = None, *, peer: str = "127.0.0.1"
) -> tuple[int, str]:
    """One GET through the ASGI app, as uvicorn would make it."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:7401")]
        + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": (peer, 5000),
        "server": ("127.0.0.1", 7401),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body.decode()


def test_an_unexpected_failure_is_a_one_line_page(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from webui import runs

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(runs, "fetch_runs", broken)
    app = create_app(UiConfig())
    status, body = asyncio.run(_call(app, "/namespaces/default/runs"))
    assert status == 500 and "INTERNAL" in body and "RuntimeError" in body
    assert "secret internals" not in body and "Traceback" not in body
    assert "secret internals" in caplog.text  # logged, with its traceback
    status, body = asyncio.run(
        _call(app, "/namespaces/default/runs", {"HX-Request": "true", "HX-Target": "x"})
    )
    assert status == 200 and body.strip().startswith('<div class="error"')


def test_a_page_whose_service_does_not_answer_is_a_504(monkeypatch: pytest.MonkeyPatch) -> None:
    from webui import runs

    async def stuck(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(30)

    monkeypatch.setattr(runs, "fetch_runs", stuck)
    app = create_app(UiConfig(rpc_timeout=timedelta(milliseconds=50)))
    status, body = asyncio.run(_call(app, "/namespaces/default/runs"))
    assert status == 504 and "the service did not answer within 0.05 s" in body
    assert all(le.users == 0 for le in app.state.ui.clients._clients.values())  # released


def test_the_hosts_a_request_may_name() -> None:
    assert UiConfig(listen="10.0.0.5:7401", allowed_hosts=("ui.example",)).hosts() == [
        "10.0.0.5",
        "127.0.0.1",
        "[::1]",
        "localhost",
        "ui.example",
    ]
    assert "0.0.0.0" not in UiConfig(listen="0.0.0.0:7401").hosts()
    # A :port given with a name is dropped (a Host is matched without its port).
    ported = UiConfig(allowed_hosts=("UI.example:8443", "[::2]:7401", "*.example.com"))
    assert {"ui.example", "[::2]", "*.example.com"} <= set(ported.hosts())
    for every in ("*", "*:80", " "):
        assert "DNS-rebinding" in (UiConfig(allowed_hosts=(every,)).refusal() or "")


class KeyedClient:
    """A client of a server that asks for credentials: without a key every call is
    UNAUTHENTICATED, with one it is refused (PERMISSION_DENIED, for a page to show)."""

    made: list[str | None] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.namespace = kwargs["namespace"]
        self.api_key = kwargs.get("api_key")

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            KeyedClient.made.append(self.api_key)
            if self.api_key is None:
                raise UnauthenticatedError("give a key")
            raise PermissionDeniedError(f"{self.api_key} may not")

        return call

    async def close(self) -> None:
        pass


def test_the_uis_own_key_is_never_used_for_a_forwarded_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service, "AsyncClient", KeyedClient)
    KeyedClient.made = []
    app = create_app(UiConfig(api_key="weft.k_000000000000.own"))
    runs = "/namespaces/default/runs"
    status, body = asyncio.run(_call(app, runs))  # straight from this machine
    assert status == 403 and "weft.k_000000000000.own may not" in body
    assert set(KeyedClient.made) == {"weft.k_000000000000.own"}
    for header in (
        "Forwarded",
        "X-Forwarded-For",
        "X-Forwarded-Host",
        "X-Forwarded-Proto",
        "X-Real-IP",
    ):
        KeyedClient.made = []
        status, _ = asyncio.run(_call(app, runs, {header: "203.0.113.9"}))
        assert status == 303 and set(KeyedClient.made) == {None}, header  # to /login
    # A peer that is not loopback (a proxy elsewhere) neither.
    KeyedClient.made = []
    status, _ = asyncio.run(_call(app, runs, peer="10.0.0.7"))
    assert status == 303 and set(KeyedClient.made) == {None}


async def _send(
    app: Any, method: str, path: str, form: dict[str, str] | None = None, cookie: str = ""
) -> tuple[int, str, dict[str, str]]:
    """One request through the ASGI app, as uvicorn would make it: its status, body
    and headers."""
    sent: list[dict[str, Any]] = []
    body = urlencode(form).encode() if form is not None else b""
    headers = [(b"host", b"127.0.0.1:7401")]
    if form is not None:
        headers.append((b"content-type", b"application/x-www-form-urlencoded"))
    if cookie:
        headers.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 7401),
    }
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], out.decode(), {k.decode(): v.decode() for k, v in start["headers"]}


class _Visitor:
    """One browser's cookie, through the ASGI app."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sid = ""

    async def go(
        self, method: str, path: str, form: dict[str, str] | None = None
    ) -> tuple[int, str, dict[str, str]]:
        status, body, headers = await _send(self.app, method, path, form, self.sid)
        found = re.search(COOKIE + r"=([^;]+)", headers.get("set-cookie", ""))
        if found:
            self.sid = found.group(1)
        return status, body, headers

    async def login(self, key: str) -> tuple[int, str]:
        _, page, _ = await self.go("GET", "/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf, page[:300]
        status, body, _ = await self.go("POST", "/login", {"csrf": csrf.group(1), "api_key": key})
        return status, body


class CheckedClient:
    """A client whose check call (describe_namespace) raises `CheckedClient.raises`."""

    raises: Exception | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.namespace = kwargs["namespace"]

    async def describe_namespace(self, namespace: str) -> None:
        if CheckedClient.raises is not None:
            raise CheckedClient.raises

    async def close(self) -> None:
        pass


def test_a_key_is_accepted_only_on_an_answer_about_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "AsyncClient", CheckedClient)
    app = create_app(UiConfig())
    key = "weft.k_000000000000.secret"
    ui = app.state.ui

    async def scenario() -> None:
        for accepted in (None, PermissionDeniedError("narrow"), NotFoundError("no such ns")):
            CheckedClient.raises = accepted
            visitor = _Visitor(app)
            status, _ = await visitor.login(key)
            assert status == 303, accepted
            assert ui.sessions.get(visitor.sid).api_key == key
        for refused, code in (
            (UnauthenticatedError("unknown key"), "UNAUTHENTICATED"),
            (UnavailableError("down"), "could not check the key: UNAVAILABLE: down"),
            (InternalError("boom"), "could not check the key: INTERNAL: boom"),
            (DeadlineExceededError("slow"), "could not check the key: DEADLINE_EXCEEDED: slow"),
            (ResourceExhaustedError("busy"), "could not check the key: RESOURCE_EXHAUSTED"),
        ):
            CheckedClient.raises = refused
            visitor = _Visitor(app)
            status, body = await visitor.login(key)
            assert status >= 400 and code in body, (refused, body[-500:])
            assert ui.sessions.get(visitor.sid).api_key is None

    asyncio.run(scenario())


def test_one_key_holds_a_bounded_number_of_sessions() -> None:
    store = SessionStore(idle_seconds=3600, max_sessions=10_000)
    key = "weft.k_000000000000.secret"
    mine = [store.login(store.new(), key, "k") for _ in range(MAX_PER_KEY + 5)]
    other = store.login(store.new(), "weft.k_000000000001.other", "k1")
    assert all(store.get(s.sid) is None for s in mine[:5])
    assert all(store.get(s.sid) is s for s in mine[5:]) and store.get(other.sid) is other


def test_a_login_form_outlives_its_anonymous_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cookie-less requests fill the anonymous bound between GET and POST /login:
    the session is pushed out, yet its form's token is still good."""
    monkeypatch.setattr(service, "AsyncClient", CheckedClient)
    CheckedClient.raises = None
    app = create_app(UiConfig(max_anonymous_sessions=5))
    ui = app.state.ui
    key = "weft.k_000000000000.secret"

    async def scenario() -> None:
        visitor = _Visitor(app)
        _, page, _ = await visitor.go("GET", "/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf
        for _ in range(20):
            await _send(app, "GET", "/login")
        assert ui.sessions.get(visitor.sid, touch=False) is None  # pushed out
        status, _, _ = await visitor.go("POST", "/login", {"csrf": csrf.group(1), "api_key": key})
        assert status == 303 and ui.sessions.get(visitor.sid).api_key == key
        # A well-formed id nobody was given comes back anonymous, never logged in;
        # a malformed one is replaced.
        assert ui.sessions.revive("A" * 43).api_key is None
        assert ui.sessions.revive("not an id") is None

    asyncio.run(scenario())


def test_a_logged_in_session_never_comes_back_from_its_cookie() -> None:
    store = SessionStore(idle_seconds=3600, max_sessions=1)
    first = store.login(store.new(), "weft.k_000000000000.secret", "k")
    store.login(store.new(), "weft.k_000000000001.other", "k1")  # pushes `first` out
    assert store.get(first.sid) is None
    back = store.revive(first.sid)
    assert back is not None and back.api_key is None and back.csrf == first.csrf


@pytest.mark.parametrize(
    ("name", "written"),
    [
        (".", "~."),
        ("..", "~.."),
        ("...", "..."),  # not a dot segment
        ("~.", "~~."),  # would read as "."
        ("~~x", "~~~x"),  # would read as "~x"
        ("~", "~"),
        ("~team", "~team"),  # reads as itself: links from before the mark still work
        ("a~b", "a~b"),
        ("team/a b?", "team%2Fa%20b%3F"),
        ("./..", ".%2F.."),  # one segment: its slash travels as %2F
    ],
)
def test_a_name_is_written_as_one_segment_and_read_back(name: str, written: str) -> None:
    assert segment(name) == written
    decoded = written.replace("%2F", "/").replace("%20", " ").replace("%3F", "?")
    reader = NamePathConvertor() if "/" in decoded else NameConvertor()
    assert re.fullmatch(reader.regex, decoded)
    assert reader.convert(decoded) == name
