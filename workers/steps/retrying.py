"""The `retry` step's arithmetic, kept pure so it can be tested exactly.

Brooklyn's semantics (reference brooklyn-dsl.md §7, STEPS.md "Errors"):
limits `N`, `DURATION` and `N in DURATION`; backoff
`INITIAL... [increasing Nx|P%|DURATION] [up to MAX] [jitter J]`; a repurposed
`timeout` (time since the oldest recorded retry); and the rules that turn
`replay` / `from` into a continuation. The interpreter owns the side effects:
where retry records live, the durable timer for the delay, and the replay.
Nothing here reads a clock or a random source; callers pass `now` and `rand`
so that a decider replaying a history computes the same answers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sdk.durations import parse_duration
from workers.steps.errors import StepInterpreterError

__all__ = [
    "Backoff",
    "Continuation",
    "Limit",
    "RetrySpec",
    "RetrySpecError",
    "continuation",
    "delay",
    "limit_reached",
    "parse_backoff",
    "parse_limit",
    "sequence",
    "spec_from_args",
    "timed_out",
]


class RetrySpecError(StepInterpreterError, ValueError):
    """A `retry` step's arguments do not follow the grammar; the message says
    what was wrong and what is accepted."""


# --- limits ------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """One `limit` entry: `N` (count), `DURATION` (window) or `N in DURATION`."""

    count: int | None
    window: timedelta | None


_LIMIT_HINT = "use N, DURATION or N in DURATION"
_COUNT = re.compile(r"\d+")
_COUNT_IN = re.compile(r"(\d+)\s+in\s+(\S.*)")


def parse_limit(text: str) -> Limit:
    """Parse one limit entry such as `3`, `5m` or `2 in 5m`."""
    raw = text.strip()
    if _COUNT.fullmatch(raw):
        return Limit(int(raw), None)
    match = _COUNT_IN.fullmatch(raw)
    if match:
        return Limit(int(match.group(1)), _limit_window(text, match.group(2)))
    return Limit(None, _limit_window(text, raw))


def _limit_window(text: str, raw: str) -> timedelta:
    try:
        window = parse_duration(raw)
    except ValueError:
        raise RetrySpecError(f"invalid retry limit {text!r}: {_LIMIT_HINT}") from None
    # A zero window makes the limit either always or never reached, which is
    # never what was meant.
    if window <= timedelta(0):
        raise RetrySpecError(f"invalid retry limit {text!r}: the duration must be more than 0")
    return window


def limit_reached(limit: Limit, previous: Sequence[datetime], now: datetime) -> bool:
    """Whether `limit` refuses another retry, given the times of the earlier
    retries that share this retry's hash (oldest first)."""
    if limit.count is None:
        if limit.window is None:
            return False
        # Window only: the retries have been going on for longer than allowed.
        return bool(previous) and now - min(previous) > limit.window
    if limit.window is None:
        # `limit 3` permits three retries: refused once three are recorded.
        return len(previous) >= limit.count
    # Only retries younger than the window count (strictly: one exactly as old
    # as the window has dropped out, as in Brooklyn).
    recent = sum(1 for t in previous if now - t < limit.window)
    return recent >= limit.count


def timed_out(timeout: timedelta | None, previous: Sequence[datetime], now: datetime) -> bool:
    """The retry `timeout`: not a step timeout but a bound on how long ago the
    oldest recorded retry happened."""
    if timeout is None or not previous:
        return False
    return now - min(previous) > timeout


# --- backoff -----------------------------------------------------------------


@dataclass(frozen=True)
class Backoff:
    """How long to wait before a retry (see `delay`)."""

    initial: tuple[timedelta, ...]
    factor: float | None = None
    increase: timedelta | None = None
    max: timedelta | None = None
    jitter: float | None = None


_BACKOFF_HINT = "use INITIAL... [increasing Nx|P%|DURATION] [up to MAX] [jitter J]"
_BACKOFF_KEYS = ("initial", "factor", "increase", "jitter", "max")
_NUMBER = r"\d+(?:\.\d+)?"
_TIMES = re.compile(rf"({_NUMBER})x")
_PERCENT = re.compile(rf"({_NUMBER})%")
_PLAIN = re.compile(_NUMBER)


def parse_backoff(spec: str | Mapping[str, Any]) -> Backoff:
    """Parse the shorthand `INITIAL... [increasing F] [up to MAX] [jitter J]`
    (in that order, as Brooklyn's code requires; the docs' `max 1m` and
    jitter-before-`up to` are not accepted) or the long-form map
    `{initial, factor, increase, jitter, max}`."""
    if isinstance(spec, str):
        return _backoff_from_text(spec)
    if isinstance(spec, Mapping):
        return _backoff_from_map(spec)
    raise RetrySpecError(
        f"invalid retry backoff {spec!r}: give a string ({_BACKOFF_HINT}) or a map with "
        f"keys {', '.join(_BACKOFF_KEYS)}"
    )


def _backoff_from_text(text: str) -> Backoff:
    def bad(reason: str) -> RetrySpecError:
        return RetrySpecError(f"invalid retry backoff {text!r}: {reason}; {_BACKOFF_HINT}")

    tokens = text.split()
    # The initial durations run up to the first keyword (`max` included so
    # that the docs' `max 1m` gets a pointed message rather than "not a
    # duration").
    starts = {"increasing", "up", "jitter", "max"}
    initial: list[timedelta] = []
    while tokens and tokens[0] not in starts:
        token = tokens.pop(0)
        parsed = _duration(token)
        if parsed is None:
            raise bad(f"{token!r} is not a duration")
        initial.append(parsed)
    if not initial:
        raise bad("give at least one initial duration")

    def take(*keyword: str) -> str | None:
        """The value after `keyword` if the remaining text starts with it."""
        if tuple(tokens[: len(keyword)]) != keyword:
            return None
        del tokens[: len(keyword)]
        if not tokens:
            raise bad(f"{' '.join(keyword)!r} needs a value")
        return tokens.pop(0)

    factor: float | None = None
    increase: timedelta | None = None
    value = take("increasing")
    if value is not None:
        factor = _factor(value)
        increase = None if factor is not None else _duration(value)
        if factor is None and increase is None:
            raise bad(f"'increasing' takes Nx, P% or a duration, not {value!r}")
    maximum: timedelta | None = None
    value = take("up", "to")
    if value is not None:
        maximum = _duration(value)
        if maximum is None:
            raise bad(f"'up to' takes a duration, not {value!r}")
    jitter: float | None = None
    value = take("jitter")
    if value is not None:
        jitter = _fraction(value)
        if jitter is None:
            raise bad(f"'jitter' takes a number or a percentage, not {value!r}")
    if tokens and tokens[0] == "max":
        # The docs show `max 1m`, which Brooklyn's parser does not accept.
        raise bad("write 'up to MAX', not 'max MAX'")
    if tokens:
        # Most often the docs' order (`jitter` before `up to`) or a repeat.
        raise bad(f"unexpected {tokens[0]!r} (the parts go in this order)")
    return Backoff(tuple(initial), factor, increase, maximum, jitter)


def _backoff_from_map(spec: Mapping[str, Any]) -> Backoff:
    def bad(reason: str) -> RetrySpecError:
        return RetrySpecError(f"invalid retry backoff {dict(spec)!r}: {reason}")

    def duration(key: str, value: object) -> timedelta:
        parsed = _duration(value)
        if parsed is None:
            raise bad(f"{key!r} takes a duration, not {value!r}")
        return parsed

    unknown = sorted(str(k) for k in spec if k not in _BACKOFF_KEYS)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r}; the keys are {', '.join(_BACKOFF_KEYS)}")
    raw_initial = spec.get("initial")
    items = raw_initial if isinstance(raw_initial, list | tuple) else [raw_initial]
    initial = tuple(duration("initial", item) for item in items if item is not None)
    if not initial:
        raise bad("'initial' is required: a duration or a list of durations")
    # A YAML key left empty (`max:`) means absent, as in the shorthand.
    factor = spec.get("factor")
    if factor is not None:
        # Brooklyn's map field is the multiplier itself; `3x` and `50%` are
        # accepted too so the map and the shorthand read alike.
        factor = _number(factor) if not isinstance(factor, str) else _factor(factor, plain=True)
        if factor is None:
            raise bad(f"'factor' takes a number, Nx or P%, not {spec['factor']!r}")
    jitter = spec.get("jitter")
    if jitter is not None:
        jitter = _number(jitter) if not isinstance(jitter, str) else _fraction(jitter)
        if jitter is None:
            raise bad(f"'jitter' takes a number or a percentage, not {spec['jitter']!r}")
    increase, maximum = spec.get("increase"), spec.get("max")
    return Backoff(
        initial,
        factor,
        None if increase is None else duration("increase", increase),
        None if maximum is None else duration("max", maximum),
        jitter,
    )


def _duration(value: object) -> timedelta | None:
    """A duration string (or a non-negative timedelta); None if it is not one.
    A bare `0` is a zero wait (Brooklyn's own example is
    `0 0 100ms increasing 100%`); any other number needs a unit."""
    if isinstance(value, timedelta):
        return value if value >= timedelta(0) else None
    if not isinstance(value, str):
        return None
    if value.strip() == "0":
        return timedelta(0)
    try:
        return parse_duration(value)
    except ValueError:
        return None


def _factor(text: str, *, plain: bool = False) -> float | None:
    """`3x` -> 3.0, `50%` -> 1.5 (grow by half each time), and with `plain` a
    bare number; None otherwise."""
    text = text.strip()
    if plain and _PLAIN.fullmatch(text):
        return float(text)
    times = _TIMES.fullmatch(text)
    if times:
        return float(times.group(1))
    percent = _PERCENT.fullmatch(text)
    if percent:
        return 1 + float(percent.group(1)) / 100
    return None


def _fraction(text: str) -> float | None:
    """Jitter as a number (`0.5`) or a percentage (`50%`); None otherwise."""
    text = text.strip()
    if _PLAIN.fullmatch(text):
        return float(text)
    percent = _PERCENT.fullmatch(text)
    if percent:
        return float(percent.group(1)) / 100
    return None


def _number(value: object) -> float | None:
    # bool is an int subclass; `factor: true` is a mistake, not 1.
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


_MICRO = timedelta(microseconds=1)
_LONGEST = timedelta.max // _MICRO


def delay(backoff: Backoff | None, prior_retries: int, rand: float = 0.0) -> timedelta:
    """The wait before a retry, `prior_retries` being how many retries with the
    same hash are already recorded and `rand` a number in [0, 1] that the
    caller draws deterministically (a decider must get the same value when it
    replays the history).

    While `prior_retries` indexes `initial`, that entry is used as is; after
    it the last entry grows with exponent `prior_retries - len(initial) + 1`,
    multiplied by `factor**exponent`, then `increase * exponent` added (in
    that order if a map gives both). Jitter then scales by `1 + rand*jitter`;
    a result over `max` becomes `max`, divided by `1 + rand*jitter` when
    jitter is set so that capped waits still spread out (Brooklyn's rule).
    """
    if prior_retries < 0:
        raise ValueError(f"prior_retries must be 0 or more, not {prior_retries}")
    if backoff is None or not backoff.initial:
        return timedelta(0)
    initial = backoff.initial
    if prior_retries < len(initial):
        base, exponent = initial[prior_retries], 0
    else:
        base, exponent = initial[-1], prior_retries - len(initial) + 1
    # Work in float microseconds: a long run of multiplications can exceed
    # what timedelta holds before the cap brings it back down.
    micros = float(base // _MICRO)
    if backoff.factor is not None and exponent:
        try:
            micros *= backoff.factor**exponent
        except OverflowError:
            micros = math.inf
    if backoff.increase is not None:
        micros += (backoff.increase // _MICRO) * exponent
    spread = 1 + rand * backoff.jitter if backoff.jitter is not None else 1.0
    micros *= spread
    if backoff.max is not None and micros > backoff.max // _MICRO:
        micros = (backoff.max // _MICRO) / spread
    if micros >= _LONGEST:
        # Without a cap, an absurd growth waits as long as a timedelta can
        # (converting the float would overflow).
        return timedelta.max
    return timedelta(microseconds=micros)


def sequence(backoff: Backoff, n: int) -> list[timedelta]:
    """The first `n` delays without jitter (for docs and tests)."""
    return [delay(backoff, r) for r in range(n)]


# --- the whole step ----------------------------------------------------------


@dataclass(frozen=True)
class RetrySpec:
    """A `retry` step's arguments, parsed and checked."""

    replay: bool | str | None  # None (unspecified), True, False or "force"
    target: str | None  # `from ID` / long-form `next`: a step id, "start", "last", "end"
    limits: tuple[Limit, ...]
    backoff: Backoff | None
    timeout: timedelta | None
    hash: str | None


_REPLAY_WORDS: dict[str, bool | str] = {
    "true": True,
    "yes": True,
    "false": False,
    "no": False,
    "force": "force",
}


def spec_from_args(args: Mapping[str, Any]) -> RetrySpec:
    """Build a `RetrySpec` from the step's arguments as the definition parser
    gives them: `replay`, `from` (or long-form `next`), `limit`, `backoff`,
    `timeout` and `hash`. Raises `RetrySpecError` for anything malformed,
    before any retry is recorded."""
    replay = _replay(args.get("replay"))
    target = _target(args)
    if replay is False and target is None:
        raise _no_target()
    raw_limits = args.get("limit")
    if raw_limits is None:
        entries: Sequence[object] = ()
    elif isinstance(raw_limits, str | int):
        entries = (raw_limits,)
    elif isinstance(raw_limits, list | tuple):
        entries = raw_limits
    else:
        raise RetrySpecError(f"invalid retry limit {raw_limits!r}: {_LIMIT_HINT}")
    limits = tuple(_limit_entry(entry) for entry in entries)
    raw_backoff = args.get("backoff")
    backoff = None if raw_backoff is None else parse_backoff(raw_backoff)
    raw_hash = args.get("hash")
    hash_key = None if raw_hash is None or not str(raw_hash).strip() else str(raw_hash).strip()
    return RetrySpec(replay, target, limits, backoff, _timeout(args.get("timeout")), hash_key)


def _replay(value: object) -> bool | str | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _REPLAY_WORDS:
        return _REPLAY_WORDS[value.strip().lower()]
    raise RetrySpecError(f"invalid retry replay {value!r}: use true, false or force")


def _target(args: Mapping[str, Any]) -> str | None:
    # Shorthand `from ID` and long-form `next` name the same thing; blank
    # means unspecified, as in Brooklyn.
    found = [str(args[k]).strip() for k in ("from", "next") if args.get(k) is not None]
    found = [f for f in found if f]
    if len(set(found)) > 1:
        raise RetrySpecError(
            f"retry has both from {found[0]!r} and next {found[1]!r}: give only one target"
        )
    return found[0] if found else None


def _limit_entry(entry: object) -> Limit:
    # bool is an int subclass: `limit: true` is a mistake, not a count of 1.
    if isinstance(entry, int) and not isinstance(entry, bool):
        entry = str(entry)
    if not isinstance(entry, str):
        raise RetrySpecError(f"invalid retry limit {entry!r}: {_LIMIT_HINT}")
    return parse_limit(entry)


def _timeout(value: object) -> timedelta | None:
    if value is None:
        return None
    parsed = _duration(value)
    if parsed is None:
        raise RetrySpecError(f"invalid retry timeout {value!r}: use a duration such as 30s or 5m")
    return parsed


def _no_target() -> RetrySpecError:
    return RetrySpecError(
        "retry with replay false needs a target: add 'from STEP' (long form 'next')"
    )


@dataclass(frozen=True)
class Continuation:
    """Where the workflow goes after a retry is granted.

    `kind`: "resume" (replay resuming the failed step), "replay_from" (replay
    from `target`, which the interpreter snaps back to a replay point unless
    forced) or "goto" (jump to `target` keeping the current variables).
    """

    kind: str
    target: str | None  # a step id, "last", "start"; None for "resume"
    force: bool


def continuation(spec: RetrySpec, in_handler: bool) -> Continuation:
    """Brooklyn's continuation decision (§7). With neither `replay` nor a
    target a retry in an `on-error` handler replays resuming the failed step
    and elsewhere replays from the last replay point; a target alone is a
    plain goto; `replay` alone replays from the last replay point."""
    replay, target = spec.replay, spec.target
    if replay is None:
        if target is None:
            replay, target = True, ("end" if in_handler else "last")
        else:
            replay = False
    elif target is None and replay is not False:
        target = "last"
    if replay is False:
        if target is None:
            raise _no_target()
        return Continuation("goto", target, False)
    force = replay == "force"
    if target == "end":
        if in_handler:
            return Continuation("resume", None, force)
        # Resuming means re-entering the failed step, and outside a handler
        # there is none: Brooklyn downgrades to the last replay point.
        target = "last"
    return Continuation("replay_from", target, force)
