"""The web UI in a real browser against a real server, decider and runner: each
page, each action, bad input, and reading with JavaScript off."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from tests.ui.conftest import TASK_LIST, Stack, playwright_api, shot

expect = playwright_api().expect

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 20.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not true within {timeout}s: {value!r}"
        time.sleep(0.1)


def start_wait(stack: Stack, prefix: str = "wait") -> tuple[str, str]:
    """A `ui-wait` step workflow, once it waits for its `go` signal."""
    run = stack.client.start_workflow(
        "ui-wait",
        {"who": "ui"},
        workflow_id=f"{prefix}-{uuid.uuid4().hex[:8]}",
        task_list=TASK_LIST,
    )
    wait_for(
        lambda: any(e.type == "DeciderCompleted" for e in stack.client.history(run.workflow_id))
    )
    return run.workflow_id, run.run_id


def run_path(workflow_id: str, run_id: str) -> str:
    return f"/namespaces/default/runs/{quote(workflow_id, safe='')}/{run_id}"


def types_of(stack: Stack, workflow_id: str) -> list[str]:
    return [e.type for e in stack.client.history(workflow_id)]


def test_runs_page_counts_and_filters(stack: Stack, page: Any) -> None:
    waiting, _ = start_wait(stack, "filter-wait")
    order = stack.client.start_workflow(
        "order",
        {"sku": "book", "quantity": 1, "amount": 12.5},
        workflow_id=f"filter-order-{uuid.uuid4().hex[:6]}",
    )
    page.goto(stack.ui.url + "/")
    expect(page).to_have_url(re.compile(r"/namespaces/default/runs$"))
    expect(page.locator("tr.run", has_text=waiting)).to_be_visible()
    expect(page.locator("tr.run", has_text=order.workflow_id)).to_be_visible()
    expect(page.locator('a.tab[data-status="open"] .count')).not_to_have_text("0")
    shot(page, "runs")

    page.fill('input[name="type"]', "ui-wait")
    page.click('button:has-text("Filter")')
    expect(page).to_have_url(re.compile(r"type=ui-wait"))
    expect(page.locator("tr.run", has_text=waiting)).to_be_visible()
    expect(page.locator("tr.run", has_text=order.workflow_id)).to_have_count(0)

    # By id prefix, and by status: a filter in the URL is a link to share.
    page.goto(stack.ui.url + f"/namespaces/default/runs?id={order.workflow_id[:14]}")
    expect(page.locator("tr.run", has_text=order.workflow_id)).to_be_visible()
    expect(page.locator("tr.run", has_text=waiting)).to_have_count(0)
    page.goto(stack.ui.url + "/namespaces/default/runs?status=completed&type=ui-wait")
    expect(page.locator("tr.run", has_text=waiting)).to_have_count(0)
    page.goto(stack.ui.url + "/namespaces/default/runs?from=yesterday")
    expect(page.locator(".error")).to_contain_text("is not a time")


def test_a_run_its_history_and_timeline(stack: Stack, page: Any) -> None:
    order = stack.client.start_workflow(
        "order",
        {"sku": "lamp", "quantity": 2, "amount": 30},
        workflow_id=f"order-{uuid.uuid4().hex[:6]}",
    )
    # The order ships, then waits for the carrier's `delivered`.
    wait_for(lambda: "ActivitySuccess" in types_of(stack, order.workflow_id), timeout=30)
    page.goto(stack.ui.url + run_path(order.workflow_id, order.run_id))
    expect(page.locator("h1.run-title")).to_contain_text(order.workflow_id)
    expect(page.locator("details", has_text="input")).to_contain_text('"sku": "lamp"')
    shot(page, "run")

    page.click("a.tab:has-text('History')")
    expect(page.locator('tr.event[data-type="WorkflowStarted"]')).to_be_visible()
    expect(page.locator('tr.event[data-type="ActivityScheduled"]').first).to_be_visible()
    page.locator('tr.event[data-type="WorkflowStarted"] summary').click()
    expect(page.locator('tr.event[data-type="WorkflowStarted"] pre')).to_contain_text("lamp")
    shot(page, "history")

    page.click("a.tab:has-text('Timeline')")
    svg = page.locator("#timeline svg")
    expect(svg).to_be_visible()
    expect(svg.locator('g.lane[data-kind="activity"]').first).to_be_attached()
    expect(svg.locator('g.point[data-type="WorkflowStarted"]')).to_be_attached()
    shot(page, "timeline")
    page.click("a.zoom-in")
    expect(page).to_have_url(re.compile(r"t0=.*t1="))
    expect(page.locator("#timeline svg")).to_be_visible()

    # The order closes when delivered; the run page then shows its result.
    stack.client.signal(order.workflow_id, "delivered", {"at": "door"})
    wait_for(lambda: types_of(stack, order.workflow_id)[-1] == "WorkflowSuccess", timeout=30)
    page.goto(stack.ui.url + run_path(order.workflow_id, order.run_id))
    expect(page.locator(".badge.completed").first).to_be_visible()
    expect(page.locator("details", has_text="result")).to_be_visible()


def test_a_signal_from_the_ui_appears_without_reloading(stack: Stack, page: Any) -> None:
    workflow_id, run_id = start_wait(stack, "signal")
    page.goto(stack.ui.url + run_path(workflow_id, run_id) + "/history")
    expect(page.locator("tr#live")).to_be_attached()
    page.evaluate("window.__same_page = true")
    form = page.locator("#signal-form")
    form.locator('input[name="name"]').fill("go")
    form.locator('textarea[name="input"]').fill('{"approved": true}')
    form.locator("button").click()
    expect(page.locator("#action-result .outcome.confirm")).to_contain_text("Send signal 'go'")
    assert "Signal" not in types_of(stack, workflow_id)  # asked, not sent
    page.locator("#action-result button.confirm").click()
    expect(page.locator("#action-result .outcome.done")).to_contain_text("sent")
    expect(page.locator('tr.event[data-type="Signal"]')).to_be_visible(timeout=10_000)
    expect(page.locator('tr.event[data-type="WorkflowSuccess"]')).to_be_visible(timeout=15_000)
    expect(page.locator("tr#live")).to_have_count(0)  # closed: it stops following
    expect(page.locator("#run-status .badge.completed")).to_be_visible(timeout=10_000)
    assert page.evaluate("window.__same_page") is True
    shot(page, "signal")


def test_bad_signal_input_is_answered_and_nothing_is_sent(stack: Stack, page: Any) -> None:
    workflow_id, run_id = start_wait(stack, "bad-input")
    before = types_of(stack, workflow_id)
    page.goto(stack.ui.url + run_path(workflow_id, run_id))
    form = page.locator("#signal-form")
    form.locator('input[name="name"]').fill("go")
    form.locator('textarea[name="input"]').fill('{"approved": tru')
    form.locator("button").click()
    expect(page.locator("#action-result .outcome.invalid")).to_contain_text("not valid JSON")
    expect(page.locator("#action-result button.confirm")).to_have_count(0)
    shot(page, "bad-json")
    form.locator('input[name="name"]').fill("  ")
    form.locator('textarea[name="input"]').fill("{}")
    form.locator("button").click()
    expect(page.locator("#action-result .outcome.invalid")).to_contain_text("name: it is empty")
    for bad in ("NaN", '{"x": 1e400}', "[" * 101 + "]" * 101):
        form.locator('input[name="name"]').fill("go")
        form.locator('textarea[name="input"]').fill(bad)
        form.locator("button").click()
        expect(page.locator("#action-result .outcome.invalid")).to_contain_text("not valid JSON")
    # A barrier: a good signal sent after them is the only new event.
    stack.client.signal(workflow_id, "barrier", {})
    history = stack.client.history(workflow_id)
    assert [e.type for e in history[: len(before)]] == before
    signals = [e.get("signal_name") for e in history[len(before) :] if e.type == "Signal"]
    assert history[len(before)].type == "Signal" and signals == ["barrier"]


def test_terminate_from_the_ui(stack: Stack, page: Any) -> None:
    # An id with a slash, a space and a question mark: quoted in links, matched whole.
    workflow_id, run_id = start_wait(stack, "team/terminate me?")
    page.goto(stack.ui.url + run_path(workflow_id, run_id))
    form = page.locator("#terminate-form")
    form.locator('input[name="reason"]').fill("stuck in testing")
    form.locator("button").click()
    expect(page.locator("#action-result .outcome.confirm")).to_contain_text("cannot be undone")
    assert stack.client.describe(workflow_id).status == "open"
    page.locator("#action-result button.confirm").click()
    expect(page.locator("#action-result .outcome.done")).to_contain_text("terminated")
    assert stack.client.describe(workflow_id).status == "terminated"
    closing = stack.client.history(workflow_id)[-1]
    assert closing.type == "WorkflowTerminated" and closing.get("reason") == "stuck in testing"
    page.reload()
    expect(page.locator("h1 .badge.terminated")).to_be_visible()
    expect(page.locator("#terminate-form")).to_have_count(0)  # no actions on a closed run


def test_a_step_workflow_shows_its_steps(stack: Stack, page: Any) -> None:
    workflow_id, run_id = start_wait(stack, "steps")
    page.goto(stack.ui.url + run_path(workflow_id, run_id) + "/steps")
    steps = page.locator("li.step")
    expect(steps.first).to_be_visible()
    expect(page.locator('li.step[data-step="wait_go"]')).to_have_attribute("data-state", "running")
    expect(page.locator('li.step[data-step="finish"]')).to_have_attribute(
        "data-state", "not-reached"
    )
    expect(page.locator("li.step").first).to_have_attribute("data-state", "done")
    expect(page.locator("#variables")).to_contain_text("greeting")
    expect(page.locator('input[name="mode"][value="from_start"]')).to_be_enabled()
    shot(page, "steps")
    page.locator('li.step[data-step="wait_go"] a').click()
    expect(page).to_have_url(re.compile(r"step=wait_go"))
    expect(page.locator('li.step.selected[data-step="wait_go"]')).to_be_visible()
    expect(page.locator("#not-reached")).to_have_count(0)
    page.locator('li.step[data-step="finish"] a').click()
    expect(page.locator("#not-reached")).to_contain_text("finish was not reached")
    expect(page.locator("h2", has_text="Variables at wait_go")).to_be_visible()
    page.locator('li.step[data-step="wait_go"] a').click()

    # Replay from the start, in place (the run is open), after a confirmation.
    before = len(stack.client.history(workflow_id))
    page.locator('input[name="mode"][value="from_start"]').check()
    page.locator('button:has-text("Replay")').click()
    expect(page.locator("#action-result .outcome.confirm")).to_contain_text("from the start")
    assert len(stack.client.history(workflow_id)) == before
    page.locator("#action-result button.confirm").click()
    expect(page.locator("#action-result .outcome.done")).to_contain_text("in place")
    wait_for(lambda: len(stack.client.history(workflow_id)) > before)


def test_a_lock_and_its_queue(stack: Stack, page: Any) -> None:
    runs = []
    for i in range(3):
        run = stack.client.start_workflow(
            "ui-locked", {}, workflow_id=f"locked-{i}-{uuid.uuid4().hex[:6]}", task_list=TASK_LIST
        )
        runs.append(run)
        # One at a time, so that the queue's order is the order of the starts.
        wait_for(lambda run=run: "LockRequested" in types_of(stack, run.workflow_id))

    def queued() -> bool:
        locks = stack.client.list_locks("ui-lock")
        return bool(locks) and locks[0].holder is not None and len(locks[0].waiters) == 2

    wait_for(queued)
    page.goto(stack.ui.url + "/namespaces/default/locks")
    lock = page.locator('section.lock[data-lock="ui-lock"]')
    expect(lock.locator("tr.holder")).to_contain_text(runs[0].workflow_id)
    expect(lock.locator("tr.waiter")).to_have_count(2)
    expect(lock.locator("tr.waiter").nth(0)).to_contain_text(runs[1].workflow_id)
    expect(lock.locator("tr.waiter").nth(1)).to_contain_text(runs[2].workflow_id)
    shot(page, "locks")

    # Force-release: the next in the queue gets it.
    lock.locator('input[name="reason"]').fill("testing the queue")
    lock.locator("button.danger").click()
    expect(lock.locator(".outcome.confirm")).to_contain_text("Take the lock")
    lock.locator("button.confirm").click()
    expect(lock.locator(".outcome.done")).to_contain_text(runs[1].workflow_id)
    wait_for(
        lambda: stack.client.list_locks("ui-lock")[0].holder.workflow_id == runs[1].workflow_id
    )  # type: ignore[union-attr]
    page.reload()
    expect(page.locator('section.lock[data-lock="ui-lock"] tr.holder')).to_contain_text(
        runs[1].workflow_id
    )
    for run in runs:
        stack.client.terminate(run.workflow_id, reason="test over")


def test_task_lists_with_their_pollers(stack: Stack, page: Any) -> None:
    page.goto(stack.ui.url + "/namespaces/default/task-lists")
    row = page.locator(f'tr.task-list[data-task-list="{TASK_LIST}"][data-kind="decision"]')
    expect(row).to_contain_text("decider")
    expect(
        page.locator('tr.task-list[data-task-list="pci"][data-kind="activity"]')
    ).to_contain_text("runner")
    shot(page, "task-lists")
    # The runs page once the other tests have left runs of every kind (README).
    page.goto(stack.ui.url + "/namespaces/default/runs")
    expect(page.locator("tr.run").first).to_be_visible()
    shot(page, "runs-all")


def test_pages_read_with_javascript_off(stack: Stack, browser: Any) -> None:
    workflow_id, run_id = start_wait(stack, "nojs")
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1300, "height": 900}
    )
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        page.goto(stack.ui.url + "/namespaces/default/runs?type=ui-wait")
        expect(page.locator("tr.run", has_text=workflow_id)).to_be_visible()
        page.click(f"text={workflow_id}")
        expect(page.locator("h1.run-title")).to_contain_text(workflow_id)
        page.click("a.tab:has-text('History')")
        expect(page.locator('tr.event[data-type="WorkflowStarted"]')).to_be_visible()
        page.locator(
            'tr.event[data-type="WorkflowStarted"] summary'
        ).click()  # <details> needs no script
        expect(page.locator('tr.event[data-type="WorkflowStarted"] pre')).to_be_visible()
        page.click("a.tab:has-text('Timeline')")
        expect(page.locator("#timeline svg")).to_be_visible()
        page.click("a.tab:has-text('Steps')")
        expect(page.locator('li.step[data-step="wait_go"]')).to_be_visible()
        page.goto(stack.ui.url + "/namespaces/default/locks")
        expect(page.locator("h1")).to_have_text("Locks")
        # Actions work as plain forms too: a page to confirm, then back to the run.
        page.goto(stack.ui.url + run_path(workflow_id, run_id))
        form = page.locator("#signal-form")
        form.locator('input[name="name"]').fill("go")
        form.locator("button").click()
        expect(page.locator(".outcome.confirm")).to_be_visible()
        page.locator("button.confirm").click()
        expect(page).to_have_url(re.compile(re.escape(run_path(workflow_id, run_id)) + "$"))
        expect(page.locator(".flash.ok")).to_contain_text("Signal 'go' sent")
        wait_for(lambda: "Signal" in types_of(stack, workflow_id))
    finally:
        context.close()


def test_forms_without_the_csrf_token_are_refused(stack: Stack, page: Any) -> None:
    workflow_id, run_id = start_wait(stack, "csrf")
    page.goto(stack.ui.url + "/")
    answer = page.request.post(
        stack.ui.url + run_path(workflow_id, run_id) + "/actions/terminate",
        form={"reason": "forged", "confirmed": "yes", "csrf": "not-the-token"},
    )
    assert answer.status == 400 and "CSRF" in answer.text()
    assert stack.client.describe(workflow_id).status == "open"
    stack.client.terminate(workflow_id, reason="test over")


def test_a_long_history_is_paged_and_its_last_page_follows(stack: Stack, page: Any) -> None:
    # No decider polls this list: the run takes every signal and does nothing.
    run = stack.client.start_workflow(
        "quiet",
        {},
        workflow_id=f"long-{uuid.uuid4().hex[:6]}",
        task_list=f"nobody-{uuid.uuid4().hex[:6]}",
    )
    for i in range(230):
        stack.client.signal(run.workflow_id, "tick", {"i": i})
    total = len(stack.client.history(run.workflow_id))
    assert total > 200
    page.goto(stack.ui.url + run_path(run.workflow_id, run.run_id) + "/history")
    expect(page.locator("tr.event")).to_have_count(100)
    expect(page.locator("tr#live")).to_have_count(0)  # not the last page: it does not follow
    page.click("a[rel=next]")
    expect(page).to_have_url(re.compile(r"first=101$"))
    expect(page.locator("tr.event").first).to_have_id("event-101")
    page.click("a[rel=next]")
    expect(page.locator("tr.event")).to_have_count(total - 200)
    expect(page.locator("tr#live")).to_be_attached()
    stack.client.signal(run.workflow_id, "tick", {"i": "last"})
    expect(page.locator(f"tr#event-{total + 1}")).to_be_visible(timeout=10_000)
    page.goto(stack.ui.url + run_path(run.workflow_id, run.run_id) + "/timeline")
    expect(page.locator('#timeline g.point[data-type="Signal"]').first).to_be_attached()
    stack.client.terminate(run.workflow_id, reason="test over")


def test_names_a_browser_would_rewrite_are_reached(stack: Stack, page: Any) -> None:
    # A browser drops a path segment "." and folds "..", even written %2E; the UI
    # writes such a name, and one that would read as so written, as "~" + the name.
    written = {".": "~.", "..": "~..", "~.": "~~.", "~tilde": "~tilde"}
    for workflow_id, segment in written.items():
        run = stack.client.start_workflow(
            "ui-wait", {"who": "ui"}, workflow_id=workflow_id, task_list=TASK_LIST
        )
        page.goto(stack.ui.url + "/namespaces/default/runs?" + urlencode({"id": workflow_id}))
        page.get_by_role("link", name=workflow_id, exact=True).click()
        expect(page).to_have_url(
            re.compile(re.escape(f"/namespaces/default/runs/{segment}/{run.run_id}") + "$")
        )
        expect(page.locator("h1.run-title")).to_contain_text(workflow_id)
        page.click("a.tab:has-text('History')")
        expect(page.locator('tr.event[data-type="WorkflowStarted"]')).to_be_visible()
        # The go-to form takes the id as typed.
        page.goto(stack.ui.url + "/namespaces/default/runs")
        page.fill('#goto input[name="id"]', workflow_id)
        page.locator("#goto button").click()
        expect(page).to_have_url(re.compile(re.escape(f"/{segment}/{run.run_id}") + "$"))
        stack.client.terminate(workflow_id, reason="seen")
    # A namespace of dots: its pages link to each other.
    page.goto(stack.ui.url + "/namespaces/~../runs")
    expect(page.locator(".ns b")).to_have_text("..")
    page.click("a:has-text('Locks')")
    expect(page).to_have_url(re.compile(r"/namespaces/~\.\./locks$"))
    expect(page.locator(".ns b")).to_have_text("..")
