"""The web UI over plain HTTP, no browser: hostile and malformed requests, the
runs list's filters and paging, CSRF, and live parts that fail. A server with no
worker: every run stays open and takes signals."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from http.cookiejar import CookieJar
from typing import Any
from urllib.parse import quote, urlencode

from tests.ui.conftest import PlainStack


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Visitor:
    """One person's cookies, requests as a browser's form would send them."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(CookieJar()), _NoRedirect()
        )

    def request(
        self, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str, Any]:
        data = urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(req, timeout=20) as resp:
                return resp.status, resp.read().decode(), resp.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers

    def get(self, path: str, **headers: str) -> tuple[int, str]:
        status, body, _ = self.request(path, headers=headers)
        return status, body

    def post(self, path: str, form: dict[str, str], **headers: str) -> tuple[int, str]:
        status, body, _ = self.request(path, form, headers=headers)
        return status, body

    def csrf(self, path: str) -> str:
        status, body = self.get(path)
        found = re.search(r'name="csrf" value="([^"]+)"', body)
        assert found, (status, body[:500])
        return found.group(1)


def start(plain: PlainStack, prefix: str, **kw: Any) -> tuple[str, str]:
    run = plain.client.start_workflow(
        kw.pop("workflow_type", "quiet"),
        {},
        workflow_id=f"{prefix}-{uuid.uuid4().hex[:8]}",
        task_list=kw.pop("task_list", "nobody"),
    )
    return run.workflow_id, run.run_id


def run_path(workflow_id: str, run_id: str) -> str:
    return f"/namespaces/default/runs/{quote(workflow_id, safe='')}/{run_id}"


def types_of(plain: PlainStack, workflow_id: str) -> list[str]:
    return [e.type for e in plain.client.history(workflow_id)]


def rows(body: str) -> list[str]:
    """The workflow ids of a runs page's rows."""
    return re.findall(
        r'<tr class="run"[^>]*>\s*<td>.*?</td>\s*<td><a href="[^"]*">([^<]*)</a>', body, re.S
    )


# -- hostile requests -------------------------------------------------------------------


def test_a_request_naming_another_host_is_refused(plain: PlainStack) -> None:
    visitor = Visitor(plain.ui.url)
    status, body = visitor.get("/namespaces/default/runs", Host=f"evil.example:{plain.ui.port}")
    assert status == 400 and "Invalid host header" in body
    for host in ("localhost", "127.0.0.1"):
        assert visitor.get("/login", Host=f"{host}:{plain.ui.port}")[0] == 200


def test_a_cross_origin_post_is_refused_and_nothing_is_sent(plain: PlainStack) -> None:
    workflow_id, run_id = start(plain, "origin")
    visitor = Visitor(plain.ui.url)
    page = run_path(workflow_id, run_id)
    form = {"csrf": visitor.csrf(page), "name": "go", "input": "{}", "confirmed": "yes"}
    before = types_of(plain, workflow_id)
    for header in (
        {"Origin": "http://evil.example"},
        {"Referer": "http://evil.example/x"},
        {"Referer": "http://[::1"},  # unparseable: not this site (not a 500)
    ):
        status, body = visitor.post(page + "/actions/signal", form, **header)
        assert status == 403 and "not sent from this site" in body
    assert types_of(plain, workflow_id) == before
    # The same form from the site itself is sent.
    status, _ = visitor.post(page + "/actions/signal", form, Origin=plain.ui.url)
    assert status == 303
    assert types_of(plain, workflow_id) == [*before, "Signal"]


def test_forms_without_a_valid_csrf_token_are_refused(plain: PlainStack) -> None:
    workflow_id, run_id = start(plain, "csrf")
    action = run_path(workflow_id, run_id) + "/actions/terminate"
    # No cookie at all: a fresh session, whose token this is not.
    status, body = Visitor(plain.ui.url).post(
        action, {"reason": "forged", "confirmed": "yes", "csrf": "x"}
    )
    assert status == 400 and "CSRF" in body
    visitor = Visitor(plain.ui.url)
    visitor.csrf("/login")
    forged = {"csrf": "not-the-token"}
    status, body = visitor.post(
        "/namespaces/default/locks/release", {**forged, "lock": "l", "confirmed": "yes"}
    )
    assert status == 400 and "CSRF" in body
    assert visitor.post("/logout", forged)[0] == 403
    status, body = visitor.post("/login", {**forged, "api_key": "weft.k_0.x"})
    assert status == 403 and "expired" in body
    assert plain.client.describe(workflow_id).status == "open"


def test_static_files_make_no_session(plain: PlainStack) -> None:
    status, _, headers = Visitor(plain.ui.url).request("/static/weft.css")
    assert status == 200 and headers.get("Set-Cookie") is None
    status, _, headers = Visitor(plain.ui.url).request("/login")
    assert "weft_ui_session=" in headers.get("Set-Cookie", "")


# -- malformed input --------------------------------------------------------------------


def test_malformed_input_is_answered_not_a_traceback(plain: PlainStack) -> None:
    workflow_id, run_id = start(plain, "malformed")
    visitor = Visitor(plain.ui.url)
    runs = "/namespaces/default/runs"
    for query in (
        "from=0001-01-01T00:00%2B05:00",
        "to=9999-12-31T23:59-05:00",
        "from=1960-01-01",
    ):
        status, body = visitor.get(f"{runs}?{query}")
        assert status == 400 and "between 1970 and 9999" in body, query
    # A page token the server cannot read: its INVALID_ARGUMENT, on the same page.
    status, body = visitor.get(f"{runs}?page=bm90IGEgdG9rZW4")
    assert status == 400 and "INVALID_ARGUMENT" in body and 'id="filters"' in body
    page = run_path(workflow_id, run_id)
    for path in (
        "/timeline?t0=0001-01-01&t1=9999-12-31",
        "/timeline?t0=1970-01-01&t1=9990-01-01",
        "/timeline/svg?t0=0001-01-01T00:00%2B05:00&t1=9999-12-31T23:59-05:00",
        "/history?first=99999999999999999999999",
        "/history?first=-5",
        "/history/after/9223372036854775807",
        "/history/after/99999999999999999999999",
    ):
        status, body = visitor.get(page + path)
        assert status == 200 and "Traceback" not in body, path
    before = types_of(plain, workflow_id)
    csrf = visitor.csrf(page)
    for bad, why in (
        ("[" * 100_000, "deeper than 100"),
        ("[" * 101 + "]" * 101, "deeper than 100"),
        ("NaN", "NaN is not a JSON value"),
        ('{"x": Infinity}', "Infinity is not a JSON value"),
        ("-Infinity", "Infinity is not a JSON value"),
        ('{"x": 1e400}', "too large"),
        ('"\\ud800"', "lone surrogate"),
        ('{"k\\udfff": 1}', "lone surrogate"),
    ):
        status, body = visitor.post(
            page + "/actions/signal", {"csrf": csrf, "name": "go", "input": bad, "confirmed": "yes"}
        )
        assert status == 400 and why in body, (bad[:20], body[-600:])
    # 100 levels is what the service takes: sent. It is the only new event.
    status, _ = visitor.post(
        page + "/actions/signal",
        {"csrf": csrf, "name": "go", "input": "[" * 100 + "]" * 100, "confirmed": "yes"},
    )
    assert status == 303
    assert types_of(plain, workflow_id) == [*before, "Signal"]


def test_login_with_a_key_no_header_can_carry(plain: PlainStack) -> None:
    visitor = Visitor(plain.ui.url)
    csrf = visitor.csrf("/login")
    for key in ("weft.k_0\nx", "wéft.k_0.x", "weft k_0 x", "weft.k_0.\x01", "k" * 600):
        status, body = visitor.post("/login", {"csrf": csrf, "api_key": key})
        assert status == 400 and "not an API key" in body


def test_service_refusals_have_their_http_status(plain: PlainStack) -> None:
    visitor = Visitor(plain.ui.url)
    status, body = visitor.get(run_path("no-such-run", "00000000"))
    assert status == 404 and "NOT_FOUND" in body
    status, body = visitor.get("/namespaces/default/workflows?id=no-such-run")
    assert status == 404


def test_a_live_part_that_fails_keeps_its_place_and_retries(plain: PlainStack) -> None:
    visitor = Visitor(plain.ui.url)
    gone = run_path("no-such-run", "00000000")
    htmx = {"HX-Request": "true"}
    status, body = visitor.get(gone + "/status", **htmx, **{"HX-Target": "run-status"})
    assert status == 200 and body.strip().startswith('<span id="run-status"')
    assert "NOT_FOUND" in body and "load delay:2s" in body and "retry=1" in body
    status, body = visitor.get(gone + "/timeline/svg?retry=1", **htmx, **{"HX-Target": "timeline"})
    assert body.strip().startswith('<div id="timeline"') and "load delay:4s" in body
    assert "retry=2" in body


# -- following, paging and filtering ----------------------------------------------------


def test_following_stops_when_the_page_is_full(plain: PlainStack) -> None:
    workflow_id, run_id = start(plain, "full")
    for i in range(105):
        plain.client.signal(workflow_id, "tick", {"i": i})
    page = run_path(workflow_id, run_id)
    visitor = Visitor(plain.ui.url)
    _, body = visitor.get(page + "/history/after/90?first=1", **{"HX-Request": "true"})
    assert body.count('class="event') == 10 and 'id="live"' not in body
    assert f"{page}/history?first=101" in body and "newer events" in body
    _, body = visitor.get(page + "/history/after/50?first=1", **{"HX-Request": "true"})
    assert body.count('class="event') == 50 and 'id="live"' not in body
    # The page starting at 101 has room: it follows.
    _, body = visitor.get(page + "/history?first=101")
    assert 'id="live"' in body and "/history/after/" in body


def test_runs_filters_paging_and_counts(plain: PlainStack) -> None:
    kind = f"paged-{uuid.uuid4().hex[:6]}"
    before = datetime.now(UTC) - timedelta(seconds=5)
    ids = [start(plain, kind, workflow_type=kind)[0] for _ in range(53)]
    other_list = start(plain, kind, workflow_type=kind, task_list="elsewhere")[0]
    for workflow_id in ids[:2]:
        plain.client.terminate(workflow_id, reason="test")
    visitor = Visitor(plain.ui.url)
    runs = "/namespaces/default/runs"

    _, body = visitor.get(f"{runs}?type={kind}")
    first = rows(body)
    assert len(first) == 50 and first[0] == other_list  # newest first
    counts = dict(re.findall(r'data-status="(\w+)">[^<]*<span class="count">(\d+)</span>', body))
    assert counts["all"] == "54" and counts["open"] == "52" and counts["closed"] == "2"
    assert counts["terminated"] == "2" and counts["completed"] == "0"
    older = re.search(r'<a href="([^"]+)" rel="next">', body)
    assert older
    _, body = visitor.get(runs + older.group(1).replace("&amp;", "&"))
    second = rows(body)
    assert len(second) == 4 and not set(first) & set(second)
    assert set(first) | set(second) == {*ids, other_list}
    newer = re.search(r'<a href="([^"]+)" rel="prev">', body)
    assert newer
    _, body = visitor.get(runs + newer.group(1).replace("&amp;", "&"))
    assert rows(body) == first

    _, body = visitor.get(f"{runs}?type={kind}&status=terminated")
    assert sorted(rows(body)) == sorted(ids[:2])
    _, body = visitor.get(f"{runs}?type={kind}&status=closed")
    assert sorted(rows(body)) == sorted(ids[:2]) and 'class="tab on" data-status="closed"' in body
    _, body = visitor.get(f"{runs}?type={kind}&task_list=elsewhere")
    assert rows(body) == [other_list]
    since = before.strftime("%Y-%m-%dT%H:%M:%S")
    _, body = visitor.get(f"{runs}?type={kind}&task_list=elsewhere&from={since}")
    assert rows(body) == [other_list]
    _, body = visitor.get(f"{runs}?type={kind}&to={since}")
    assert rows(body) == [] and "No runs match" in body
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    _, body = visitor.get(f"{runs}?type={kind}&from={since}&to={later}&status=open")
    assert len(rows(body)) == 50


def test_a_workflow_id_from_the_go_to_form(plain: PlainStack) -> None:
    workflow_id, run_id = start(plain, "goto")
    visitor = Visitor(plain.ui.url)
    status, _, headers = visitor.request(
        f"/namespaces/default/workflows?{urlencode({'id': workflow_id})}"
    )
    assert status == 303 and headers["Location"] == run_path(workflow_id, run_id)


def test_task_lists_page_says_nothing_was_cut(plain: PlainStack) -> None:
    status, body = Visitor(plain.ui.url).get("/namespaces/default/task-lists")
    assert status == 200 and 'id="truncated"' not in body
