"""`RetryPolicy().delays()`: exponential backoff, capped, with jitter, giving up."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from sdk import RetryPolicy
from sdk.retry import DEFAULT_RETRY


def take(policy: RetryPolicy, n: int = 100) -> list[float]:
    delays, out = policy.delays(), []
    for _ in range(n):
        wait = delays.next()
        if wait is None:
            break
        out.append(wait)
    return out


@pytest.fixture
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "random", lambda: 0.0)


def test_default_policy() -> None:
    expected = RetryPolicy(
        timedelta(milliseconds=100), timedelta(seconds=5), 2.0, timedelta(minutes=1)
    )
    assert expected == DEFAULT_RETRY


@pytest.mark.usefixtures("no_jitter")
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (RetryPolicy(give_up_after=timedelta(seconds=2)), [0.1, 0.2, 0.4, 0.8, 0.5]),
        (RetryPolicy(multiplier=3.0, give_up_after=None), [0.1, 0.3, 0.9, 2.7, 5.0, 5.0]),
        (
            RetryPolicy(timedelta(seconds=1), timedelta(seconds=4), 2.0, timedelta(seconds=15)),
            [1.0, 2.0, 4.0, 4.0, 4.0],
        ),
        (RetryPolicy(give_up_after=timedelta(0)), []),
    ],
    ids=["default-clipped", "times-three", "capped", "never-retries"],
)
def test_delays_grow_cap_and_give_up(policy: RetryPolicy, expected: list[float]) -> None:
    got = take(policy, len(expected) + (policy.give_up_after is not None))
    assert got == pytest.approx(expected)


@pytest.mark.usefixtures("no_jitter")
def test_default_gives_up_after_a_minute() -> None:
    got = take(RetryPolicy(), 1000)
    assert got[:7] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0])
    assert sum(got) == pytest.approx(60.0)
    assert len(got) == 17 and max(got) == 5.0
    assert got[-1] == pytest.approx(3.7)  # clipped to the time left


@pytest.mark.usefixtures("no_jitter")
def test_no_limit_never_gives_up() -> None:
    got = take(RetryPolicy(give_up_after=None), 500)
    assert len(got) == 500 and got[-1] == 5.0


def test_jitter_is_at_most_a_fifth_below(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([0.0, 0.5, 0.999999])
    monkeypatch.setattr(random, "random", lambda: next(draws))
    policy = RetryPolicy(timedelta(seconds=1), timedelta(seconds=1), give_up_after=None)
    assert take(policy, 3) == pytest.approx([1.0, 0.9, 0.8000002])


def test_real_jitter_stays_in_range() -> None:
    got = take(RetryPolicy(give_up_after=None), 300)
    nominal = [min(0.1 * 2**i, 5.0) for i in range(300)]
    assert all(0.8 * n <= g <= n for g, n in zip(got, nominal, strict=True))
    assert len(set(got[10:])) > 1  # jittered, not constant


@pytest.mark.usefixtures("no_jitter")
def test_first_delay_is_capped_at_maximum() -> None:
    policy = RetryPolicy(timedelta(seconds=10), timedelta(seconds=5), give_up_after=None)
    assert take(policy, 2) == [5.0, 5.0]


def test_a_wait_the_server_asks_for_is_kept_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "random", lambda: 0.5)
    delays = RetryPolicy(give_up_after=timedelta(seconds=2)).delays()
    assert delays.next() == pytest.approx(0.09)  # the backoff: 0.1 s less a tenth
    # What the server asks for, a tenth longer (jitter never shortens it)...
    assert delays.pushback(0.75) == pytest.approx(0.825)
    # ...does not grow the backoff, and counts against the policy's time.
    assert delays.next() == pytest.approx(0.18)
    assert delays.elapsed == pytest.approx(1.095)
    # A wait that would end past that time is not waited: the call gives up.
    assert delays.pushback(1.0) is None
    assert delays.pushback(0.5) == pytest.approx(0.55)


def test_without_a_time_limit_the_wait_the_server_asks_for_is_always_kept() -> None:
    delays = RetryPolicy(give_up_after=None).delays()
    for _ in range(100):
        wait = delays.pushback(30.0)
        assert wait is not None and 30.0 <= wait <= 36.0
