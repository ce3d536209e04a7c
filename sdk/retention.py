"""Retention policies (STEPS.md "Retention", after Brooklyn): how long a closed
run is kept before the service's purge job deletes it with its history. Shared
by the step-definition parser (which checks `retention:` when a definition is
registered) and the service (which applies it).

    retention := [hash H] [hard] policy [soft policy] [hard] [hash H] | disabled
    policy    := N | DURATION | forever | all | context | parent | system
               | min(policy, …) | max(policy, …)

`N` keeps the N most recently closed runs of the run's group (its `hash`, by
default its workflow type); `DURATION` keeps runs closed within it; `min` keeps
what every part keeps, `max` what any part keeps; `disabled` keeps nothing once
closed. `context` is the policy in effect before (substituted when a new one is
set), `parent` the parent run's (else `system`), `system` the namespace's
default. `soft` (Brooklyn's in-memory limit) has no meaning here and is read
and ignored, as is `hard`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sdk.durations import parse_duration


class RetentionError(ValueError):
    """A retention expression that does not parse; the message says why."""


DEFAULT = "parent"
"""A run that sets no policy follows its parent, and a run without one the system."""
SYSTEM_DEFAULT = "3"
"""The namespace default, as Brooklyn's `workflow.retention.default`."""

_TOKEN = re.compile(r"\s*(\(|\)|,|[^\s(),]+)")
_REFS = ("context", "parent", "system")


@dataclass(frozen=True)
class Count:
    n: int


@dataclass(frozen=True)
class Window:
    seconds: float


@dataclass(frozen=True)
class Forever:
    pass


@dataclass(frozen=True)
class Disabled:
    pass


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Combine:
    op: str  # "min" or "max"
    parts: tuple[Policy, ...]


Policy = Count | Window | Forever | Disabled | Ref | Combine


@dataclass(frozen=True)
class Retention:
    policy: Policy
    hash: str = ""
    """The group runs are counted in ("" means the workflow type)."""


def parse(text: str) -> Retention:
    """Parse a retention expression; RetentionError says what is wrong."""
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if not tokens:
        raise RetentionError("retention: empty policy")
    group, policy, pos = "", None, 0
    while pos < len(tokens):
        word = tokens[pos].lower()
        if word == "hash":
            if pos + 1 >= len(tokens):
                raise RetentionError("retention: `hash` needs a key")
            group, pos = tokens[pos + 1], pos + 2
        elif word == "hard":
            pos += 1
        elif word == "soft":
            _, pos = _policy(tokens, pos + 1)  # an in-memory limit: nothing to do here
        elif policy is None:
            policy, pos = _policy(tokens, pos)
        else:
            raise RetentionError(f"retention: unexpected {tokens[pos]!r} in {text!r}")
    if policy is None:
        raise RetentionError(f"retention: no policy in {text!r}")
    return Retention(policy, group)


def _policy(tokens: list[str], pos: int) -> tuple[Policy, int]:
    if pos >= len(tokens):
        raise RetentionError("retention: a policy is missing")
    word = tokens[pos].lower()
    if word in ("min", "max"):
        if pos + 1 >= len(tokens) or tokens[pos + 1] != "(":
            raise RetentionError(f"retention: {word} needs (…)")
        parts: list[Policy] = []
        pos += 2
        while True:
            part, pos = _policy(tokens, pos)
            parts.append(part)
            if pos >= len(tokens):
                raise RetentionError(f"retention: {word}( is not closed")
            if tokens[pos] == ")":
                return Combine(word, tuple(parts)), pos + 1
            if tokens[pos] != ",":
                raise RetentionError(f"retention: expected , or ) in {word}(…)")
            pos += 1
    if word in ("forever", "all"):
        return Forever(), pos + 1
    if word == "disabled":
        return Disabled(), pos + 1
    if word in _REFS:
        return Ref(word), pos + 1
    if word.isdigit():
        return Count(int(word)), pos + 1
    try:
        return Window(parse_duration(word).total_seconds()), pos + 1
    except ValueError:
        raise RetentionError(
            f"retention: {tokens[pos]!r} is not a count, a duration, forever, disabled,"
            " context, parent, system, min(…) or max(…)"
        ) from None


def render(policy: Policy) -> str:
    if isinstance(policy, Count):
        return str(policy.n)
    if isinstance(policy, Window):
        return f"{policy.seconds:g}s"
    if isinstance(policy, Forever):
        return "forever"
    if isinstance(policy, Disabled):
        return "disabled"
    if isinstance(policy, Ref):
        return policy.name
    return f"{policy.op}({', '.join(render(p) for p in policy.parts)})"


def substitute_context(policy: Policy, previous: Policy) -> Policy:
    """`context` means the policy in effect before this one was set."""
    if isinstance(policy, Ref) and policy.name == "context":
        return previous
    if isinstance(policy, Combine):
        return Combine(policy.op, tuple(substitute_context(p, previous) for p in policy.parts))
    return policy


def keeps(
    policy: Policy,
    rank: int,
    age: float,
    resolve: Callable[[str], Policy],
    depth: int = 0,
) -> bool:
    """Whether a closed run is kept: `rank` 0 is its group's most recently closed
    run, `age` is seconds since it closed; `resolve` gives `parent`/`system`."""
    if depth > 10:
        raise RetentionError("retention: policies refer to each other in a loop")
    if isinstance(policy, Count):
        return rank < policy.n
    if isinstance(policy, Window):
        return age <= policy.seconds
    if isinstance(policy, Forever):
        return True
    if isinstance(policy, Disabled):
        return False
    if isinstance(policy, Ref):
        return keeps(resolve(policy.name), rank, age, resolve, depth + 1)
    results = [keeps(p, rank, age, resolve, depth + 1) for p in policy.parts]
    return all(results) if policy.op == "min" else any(results)
