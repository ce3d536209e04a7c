"""The `retry` step's pure rules (workers/steps/retrying.py), checked against
Brooklyn's exact semantics (brooklyn-dsl.md §7): limit grammar and counting,
backoff sequences, jitter and the capped-jitter rule, the repurposed
`timeout`, every parse error, and every continuation rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from workers.steps.retrying import (
    Backoff,
    Continuation,
    Limit,
    RetrySpec,
    RetrySpecError,
    continuation,
    delay,
    limit_reached,
    parse_backoff,
    parse_limit,
    sequence,
    spec_from_args,
    timed_out,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
HINT = "use INITIAL... [increasing Nx|P%|DURATION] [up to MAX] [jitter J]"


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def ago(*seconds: float) -> list[datetime]:
    """Retry records `seconds` before NOW, given oldest first."""
    return [NOW - s(x) for x in seconds]


# --- limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3", Limit(3, None)),
        (" 10 ", Limit(10, None)),
        ("0", Limit(0, None)),
        ("5m", Limit(None, s(300))),
        ("7d", Limit(None, timedelta(days=7))),
        ("1h30m", Limit(None, s(5400))),
        ("2 in 5m", Limit(2, s(300))),
        ("4  in  1h 30m", Limit(4, s(5400))),
    ],
)
def test_parse_limit(text: str, expected: Limit) -> None:
    assert parse_limit(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "invalid retry limit 'abc': use N, DURATION or N in DURATION"),
        ("", "invalid retry limit '': use N, DURATION or N in DURATION"),
        ("2.5", "invalid retry limit '2.5': use N, DURATION or N in DURATION"),
        ("-1", "invalid retry limit '-1': use N, DURATION or N in DURATION"),
        ("2 in", "invalid retry limit '2 in': use N, DURATION or N in DURATION"),
        ("2 in abc", "invalid retry limit '2 in abc': use N, DURATION or N in DURATION"),
        ("in 5m", "invalid retry limit 'in 5m': use N, DURATION or N in DURATION"),
        ("2 within 5m", "invalid retry limit '2 within 5m': use N, DURATION or N in DURATION"),
        ("0s", "invalid retry limit '0s': the duration must be more than 0"),
        ("2 in 0m", "invalid retry limit '2 in 0m': the duration must be more than 0"),
    ],
)
def test_parse_limit_errors(text: str, message: str) -> None:
    with pytest.raises(RetrySpecError) as caught:
        parse_limit(text)
    assert str(caught.value) == message


def test_limit_error_is_a_value_error() -> None:
    assert issubclass(RetrySpecError, ValueError)


@pytest.mark.parametrize(
    ("previous", "reached"),
    [
        ([], False),
        (ago(30), False),
        (ago(30, 20), False),
        # `limit 3` permits three retries: the fourth is refused.
        (ago(30, 20, 10), True),
        (ago(40, 30, 20, 10), True),
    ],
)
def test_count_limit_allows_exactly_n_retries(previous: list[datetime], reached: bool) -> None:
    assert limit_reached(Limit(3, None), previous, NOW) is reached


def test_count_limit_zero_refuses_the_first_retry() -> None:
    assert limit_reached(Limit(0, None), [], NOW) is True


def test_count_limit_ignores_age() -> None:
    assert limit_reached(Limit(2, None), ago(86400 * 30, 86400 * 29), NOW) is True


@pytest.mark.parametrize(
    ("previous", "reached"),
    [
        ([], False),
        (ago(10), False),
        (ago(120, 10), True),  # both inside 5m
        (ago(299, 1), True),
        (ago(301, 10), False),  # the older one has left the window
        (ago(300, 10), False),  # exactly as old as the window: outside (strict)
        (ago(600, 500, 400, 10), False),  # many in total, one recent
        (ago(600, 200, 10), True),
    ],
)
def test_count_in_window_counts_only_recent_retries(
    previous: list[datetime], reached: bool
) -> None:
    assert limit_reached(Limit(2, s(300)), previous, NOW) is reached


@pytest.mark.parametrize(
    ("previous", "reached"),
    [
        ([], False),
        (ago(10), False),
        (ago(300), False),  # exactly the window: not yet older than it
        (ago(301), True),
        (ago(301, 1), True),  # judged by the oldest record
        (ago(299, 1), False),
    ],
)
def test_window_only_limit_is_the_age_of_the_oldest_retry(
    previous: list[datetime], reached: bool
) -> None:
    assert limit_reached(Limit(None, s(300)), previous, NOW) is reached


def test_empty_limit_is_never_reached() -> None:
    assert limit_reached(Limit(None, None), ago(10**6, 5), NOW) is False


@pytest.mark.parametrize(
    ("timeout", "previous", "expired"),
    [
        (None, ago(10**6), False),
        (s(60), [], False),
        (s(60), ago(59), False),
        (s(60), ago(60), False),
        (s(60), ago(61), True),
        (s(60), ago(61, 1), True),
        (s(60), ago(30, 1), False),
    ],
)
def test_timed_out_is_the_age_of_the_oldest_retry(
    timeout: timedelta | None, previous: list[datetime], expired: bool
) -> None:
    assert timed_out(timeout, previous, NOW) is expired


# --- backoff: parsing ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100ms", Backoff((s(0.1),))),
        ("1s 2s", Backoff((s(1), s(2)))),
        ("0 0 100ms", Backoff((s(0), s(0), s(0.1)))),
        ("5s increasing 2x", Backoff((s(5),), factor=2.0)),
        ("1s increasing 1.5x", Backoff((s(1),), factor=1.5)),
        ("1s increasing 50%", Backoff((s(1),), factor=1.5)),
        ("1s increasing 100%", Backoff((s(1),), factor=2.0)),
        ("1s increasing 2s", Backoff((s(1),), increase=s(2))),
        ("1s 2s increasing 3x up to 1m", Backoff((s(1), s(2)), factor=3.0, max=s(60))),
        ("1s up to 1m", Backoff((s(1),), max=s(60))),
        ("1s jitter 0.5", Backoff((s(1),), jitter=0.5)),
        ("1s jitter 50%", Backoff((s(1),), jitter=0.5)),
        ("1s jitter 2", Backoff((s(1),), jitter=2.0)),
        (
            "10ms increasing 2x up to 5m jitter 25%",
            Backoff((s(0.01),), factor=2.0, max=s(300), jitter=0.25),
        ),
        ("  1s   increasing 2x  ", Backoff((s(1),), factor=2.0)),
    ],
)
def test_parse_backoff_shorthand(text: str, expected: Backoff) -> None:
    assert parse_backoff(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "give at least one initial duration"),
        ("increasing 2x", "give at least one initial duration"),
        ("abc", "'abc' is not a duration"),
        ("1s 5", "'5' is not a duration"),
        ("1s increasing", "'increasing' needs a value"),
        ("1s increasing 3", "'increasing' takes Nx, P% or a duration, not '3'"),
        ("1s increasing fast", "'increasing' takes Nx, P% or a duration, not 'fast'"),
        ("1s increasing -50%", "'increasing' takes Nx, P% or a duration, not '-50%'"),
        ("1s up to", "'up to' needs a value"),
        ("1s up to soon", "'up to' takes a duration, not 'soon'"),
        ("1s up 1m", "unexpected 'up' (the parts go in this order)"),
        ("1s jitter", "'jitter' needs a value"),
        ("1s jitter lots", "'jitter' takes a number or a percentage, not 'lots'"),
        ("1s jitter -0.5", "'jitter' takes a number or a percentage, not '-0.5'"),
        # The docs' forms that Brooklyn's code rejects.
        ("1s increasing 2x max 1m", "write 'up to MAX', not 'max MAX'"),
        ("1s max 1m", "write 'up to MAX', not 'max MAX'"),
        ("1s jitter 0.5 up to 1m", "unexpected 'up' (the parts go in this order)"),
        ("1s up to 1m increasing 2x", "unexpected 'increasing' (the parts go in this order)"),
        ("1s increasing 2x increasing 3x", "unexpected 'increasing' (the parts go in this order)"),
        ("1s jitter 0.5 extra", "unexpected 'extra' (the parts go in this order)"),
    ],
)
def test_parse_backoff_shorthand_errors(text: str, reason: str) -> None:
    with pytest.raises(RetrySpecError) as caught:
        parse_backoff(text)
    assert str(caught.value) == f"invalid retry backoff {text!r}: {reason}; {HINT}"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"initial": "5s"}, Backoff((s(5),))),
        ({"initial": ["1s", "2s"], "factor": 3}, Backoff((s(1), s(2)), factor=3.0)),
        ({"initial": "1s", "factor": 1.5}, Backoff((s(1),), factor=1.5)),
        ({"initial": "1s", "factor": "3x"}, Backoff((s(1),), factor=3.0)),
        ({"initial": "1s", "factor": "50%"}, Backoff((s(1),), factor=1.5)),
        ({"initial": "1s", "factor": "2"}, Backoff((s(1),), factor=2.0)),
        ({"initial": "1s", "increase": "2s"}, Backoff((s(1),), increase=s(2))),
        ({"initial": "1s", "max": "1m"}, Backoff((s(1),), max=s(60))),
        ({"initial": "1s", "jitter": 0.5}, Backoff((s(1),), jitter=0.5)),
        ({"initial": "1s", "jitter": "50%"}, Backoff((s(1),), jitter=0.5)),
        ({"initial": "1s", "jitter": "0.25"}, Backoff((s(1),), jitter=0.25)),
        ({"initial": "1s", "max": None, "jitter": None}, Backoff((s(1),))),
        (
            {"initial": ["1s", "2s"], "factor": 3, "max": "1m", "jitter": 0.5},
            Backoff((s(1), s(2)), factor=3.0, max=s(60), jitter=0.5),
        ),
        (
            {"initial": "1s", "factor": 2, "increase": "1s"},
            Backoff((s(1),), factor=2.0, increase=s(1)),
        ),
    ],
)
def test_parse_backoff_map(spec: dict[str, Any], expected: Backoff) -> None:
    assert parse_backoff(spec) == expected


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({}, "'initial' is required: a duration or a list of durations"),
        ({"initial": []}, "'initial' is required: a duration or a list of durations"),
        ({"initial": "soon"}, "'initial' takes a duration, not 'soon'"),
        ({"initial": ["1s", 5]}, "'initial' takes a duration, not 5"),
        ({"initial": "1s", "factor": "fast"}, "'factor' takes a number, Nx or P%, not 'fast'"),
        ({"initial": "1s", "factor": True}, "'factor' takes a number, Nx or P%, not True"),
        ({"initial": "1s", "factor": -2}, "'factor' takes a number, Nx or P%, not -2"),
        ({"initial": "1s", "increase": "2x"}, "'increase' takes a duration, not '2x'"),
        ({"initial": "1s", "max": 60}, "'max' takes a duration, not 60"),
        (
            {"initial": "1s", "jitter": "lots"},
            "'jitter' takes a number or a percentage, not 'lots'",
        ),
        (
            {"initial": "1s", "maximum": "1m"},
            "unknown key 'maximum'; the keys are initial, factor, increase, jitter, max",
        ),
    ],
)
def test_parse_backoff_map_errors(spec: dict[str, Any], reason: str) -> None:
    with pytest.raises(RetrySpecError) as caught:
        parse_backoff(spec)
    assert str(caught.value) == f"invalid retry backoff {spec!r}: {reason}"


def test_parse_backoff_rejects_other_types() -> None:
    with pytest.raises(RetrySpecError) as caught:
        parse_backoff(5)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"invalid retry backoff 5: give a string ({HINT}) or a map with "
        "keys initial, factor, increase, jitter, max"
    )


# --- backoff: delays -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected_seconds"),
    [
        # The docs' example: growth from the last initial, capped at 1m.
        ("1s 2s increasing 3x up to 1m", [1, 2, 6, 18, 54, 60, 60]),
        ("5s increasing 2x", [5, 10, 20, 40]),
        ("100ms", [0.1, 0.1, 0.1, 0.1]),
        ("1s 2s 3s", [1, 2, 3, 3, 3]),
        ("1s increasing 50%", [1, 1.5, 2.25, 3.375, 5.0625]),
        ("1s increasing 2s", [1, 3, 5, 7, 9]),
        ("1s 10s increasing 5s", [1, 10, 15, 20]),
        ("0 0 100ms increasing 100% up to 1s", [0, 0, 0.1, 0.2, 0.4, 0.8, 1, 1]),
        ("10ms 20ms increasing 3x up to 200ms", [0.01, 0.02, 0.06, 0.18, 0.2]),
        ("1m up to 30s", [30, 30]),
        ("1s jitter 0.5", [1, 1, 1]),  # rand 0: jitter adds nothing
    ],
)
def test_sequence(text: str, expected_seconds: list[float]) -> None:
    expected = [s(x) for x in expected_seconds]
    assert sequence(parse_backoff(text), len(expected)) == expected


def test_no_backoff_is_no_wait() -> None:
    assert delay(None, 0) == timedelta(0)
    assert delay(None, 7, rand=1.0) == timedelta(0)


def test_empty_initial_is_no_wait() -> None:
    assert delay(Backoff(()), 3) == timedelta(0)


@pytest.mark.parametrize(
    ("text", "prior", "rand", "expected_seconds"),
    [
        ("10s jitter 0.5", 0, 0.0, 10),
        ("10s jitter 0.5", 0, 1.0, 15),
        ("10s jitter 50%", 0, 0.5, 12.5),
        ("10s increasing 2x jitter 0.5", 2, 1.0, 60),  # 40s, then x1.5
        # Under the cap jitter simply scales.
        ("10s increasing 2x up to 1m jitter 0.5", 1, 1.0, 30),
        # Capped: with rand 0 the cap itself ...
        ("10s increasing 2x up to 15s jitter 0.5", 1, 0.0, 15),
        # ... with rand 1 the cap divided by (1 + rand*jitter): 15s / 1.5.
        ("10s increasing 2x up to 15s jitter 0.5", 1, 1.0, 10),
        # Jitter alone can push over the cap: 10s x1.5 = 15s > 12s -> 12s/1.5.
        ("10s up to 12s jitter 0.5", 0, 1.0, 8),
        # Exactly at the cap is not capped.
        ("10s up to 15s jitter 0.5", 0, 1.0, 15),
        # Capped without jitter: rand plays no part.
        ("10s increasing 2x up to 15s", 1, 1.0, 15),
    ],
)
def test_delay_with_jitter(text: str, prior: int, rand: float, expected_seconds: float) -> None:
    assert delay(parse_backoff(text), prior, rand) == s(expected_seconds)


def test_delay_from_a_map_with_factor_and_increase_multiplies_then_adds() -> None:
    backoff = parse_backoff({"initial": "1s", "factor": 2, "increase": "1s"})
    # exponent 2: 1s * 2**2 + 1s * 2
    assert delay(backoff, 2) == s(6)


def test_unbounded_growth_saturates_instead_of_overflowing() -> None:
    backoff = parse_backoff("1s increasing 2x")
    assert delay(backoff, 100) == timedelta.max
    assert delay(backoff, 100_000) == timedelta.max


def test_huge_growth_is_still_capped() -> None:
    assert delay(parse_backoff("1s increasing 2x up to 1h"), 100_000) == s(3600)
    assert delay(parse_backoff("1s increasing 2x up to 1h jitter 1"), 100_000, 1.0) == s(1800)


def test_negative_prior_retries_is_a_bug() -> None:
    with pytest.raises(ValueError, match="prior_retries must be 0 or more, not -1"):
        delay(parse_backoff("1s"), -1)


# --- spec_from_args ------------------------------------------------------------


def test_spec_from_shorthand_args() -> None:
    spec = spec_from_args(
        {
            "replay": True,
            "from": "wait_for_approval",
            "limit": ("7d",),
            "backoff": "10s increasing 2x up to 5m",
            "timeout": "1h",
            "hash": None,
        }
    )
    assert spec == RetrySpec(
        replay=True,
        target="wait_for_approval",
        limits=(Limit(None, timedelta(days=7)),),
        backoff=Backoff((s(10),), factor=2.0, max=s(300)),
        timeout=s(3600),
        hash=None,
    )


def test_spec_from_empty_args() -> None:
    assert spec_from_args({}) == RetrySpec(None, None, (), None, None, None)


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (None, ()),
        ("3", (Limit(3, None),)),
        (3, (Limit(3, None),)),
        ((), ()),
        (("3", "2 in 5m"), (Limit(3, None), Limit(2, s(300)))),
        ([1], (Limit(1, None),)),
        (["5m", 4], (Limit(None, s(300)), Limit(4, None))),
    ],
)
def test_spec_limits(limit: object, expected: tuple[Limit, ...]) -> None:
    assert spec_from_args({"limit": limit}).limits == expected


@pytest.mark.parametrize(
    ("args", "replay", "target", "hash_key"),
    [
        ({"replay": None}, None, None, None),
        ({"replay": False, "from": "a"}, False, "a", None),
        ({"replay": "force"}, "force", None, None),
        ({"replay": "Force"}, "force", None, None),
        ({"replay": "true"}, True, None, None),
        ({"replay": "no", "next": "a"}, False, "a", None),
        ({"next": "start"}, None, "start", None),
        ({"from": "  "}, None, None, None),
        ({"from": "a", "next": "a"}, None, "a", None),
        ({"hash": "shared"}, None, None, "shared"),
        ({"hash": " "}, None, None, None),
        ({"hash": 7}, None, None, "7"),
    ],
)
def test_spec_replay_target_and_hash(
    args: dict[str, Any], replay: bool | str | None, target: str | None, hash_key: str | None
) -> None:
    spec = spec_from_args(args)
    assert (spec.replay, spec.target, spec.hash) == (replay, target, hash_key)


def test_spec_map_backoff_and_timedelta_timeout() -> None:
    spec = spec_from_args({"backoff": {"initial": "1s", "factor": 2}, "timeout": s(30)})
    assert spec.backoff == Backoff((s(1),), factor=2.0)
    assert spec.timeout == s(30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"replay": "maybe"}, "invalid retry replay 'maybe': use true, false or force"),
        ({"replay": 1}, "invalid retry replay 1: use true, false or force"),
        (
            {"replay": False},
            "retry with replay false needs a target: add 'from STEP' (long form 'next')",
        ),
        (
            {"from": "a", "next": "b"},
            "retry has both from 'a' and next 'b': give only one target",
        ),
        ({"limit": "abc"}, "invalid retry limit 'abc': use N, DURATION or N in DURATION"),
        ({"limit": [True]}, "invalid retry limit True: use N, DURATION or N in DURATION"),
        ({"limit": {"n": 3}}, "invalid retry limit {'n': 3}: use N, DURATION or N in DURATION"),
        ({"limit": 2.5}, "invalid retry limit 2.5: use N, DURATION or N in DURATION"),
        (
            {"backoff": "1s max 1m"},
            f"invalid retry backoff '1s max 1m': write 'up to MAX', not 'max MAX'; {HINT}",
        ),
        ({"timeout": "soon"}, "invalid retry timeout 'soon': use a duration such as 30s or 5m"),
        ({"timeout": 30}, "invalid retry timeout 30: use a duration such as 30s or 5m"),
    ],
)
def test_spec_errors(args: dict[str, Any], message: str) -> None:
    with pytest.raises(RetrySpecError) as caught:
        spec_from_args(args)
    assert str(caught.value) == message


# --- continuation ----------------------------------------------------------------


def spec(replay: bool | str | None = None, target: str | None = None) -> RetrySpec:
    return RetrySpec(replay, target, (), None, None, None)


@pytest.mark.parametrize(
    ("replay", "target", "in_handler", "expected"),
    [
        # Neither replay nor target: resume in a handler, last replay point elsewhere.
        (None, None, True, Continuation("resume", None, False)),
        (None, None, False, Continuation("replay_from", "last", False)),
        # A target alone is a plain goto, keeping the variables.
        (None, "again", True, Continuation("goto", "again", False)),
        (None, "again", False, Continuation("goto", "again", False)),
        (None, "start", False, Continuation("goto", "start", False)),
        # `replay` alone replays from the last replay point, even in a handler.
        (True, None, True, Continuation("replay_from", "last", False)),
        (True, None, False, Continuation("replay_from", "last", False)),
        ("force", None, False, Continuation("replay_from", "last", True)),
        # `replay from X`.
        (True, "fetch", False, Continuation("replay_from", "fetch", False)),
        (True, "start", True, Continuation("replay_from", "start", False)),
        (True, "last", True, Continuation("replay_from", "last", False)),
        ("force", "fetch", True, Continuation("replay_from", "fetch", True)),
        # `end` resumes, but only inside a handler; outside it becomes `last`.
        (True, "end", True, Continuation("resume", None, False)),
        ("force", "end", True, Continuation("resume", None, True)),
        (True, "end", False, Continuation("replay_from", "last", False)),
        ("force", "end", False, Continuation("replay_from", "last", True)),
        # replay false: a goto, never forced.
        (False, "again", True, Continuation("goto", "again", False)),
        (False, "end", False, Continuation("goto", "end", False)),
    ],
)
def test_continuation(
    replay: bool | str | None, target: str | None, in_handler: bool, expected: Continuation
) -> None:
    assert continuation(spec(replay, target), in_handler) == expected


@pytest.mark.parametrize("in_handler", [True, False])
def test_continuation_replay_false_without_target_is_an_error(in_handler: bool) -> None:
    with pytest.raises(RetrySpecError) as caught:
        continuation(spec(False, None), in_handler)
    assert str(caught.value) == (
        "retry with replay false needs a target: add 'from STEP' (long form 'next')"
    )


def test_continuation_from_parsed_shorthand() -> None:
    # `retry from wait_for_approval limit 7d ...`: no `replay`, so a goto.
    parsed = spec_from_args({"from": "wait_for_approval", "limit": ("7d",)})
    assert continuation(parsed, in_handler=True) == Continuation("goto", "wait_for_approval", False)
    # `retry replay from start`.
    parsed = spec_from_args({"replay": True, "from": "start"})
    assert continuation(parsed, in_handler=False) == Continuation("replay_from", "start", False)
