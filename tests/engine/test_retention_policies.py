"""Retention policies (engine/retention.py): the grammar of STEPS.md and what
each policy keeps, as pure functions."""

from __future__ import annotations

import pytest

from orchestrator.engine import retention as r
from orchestrator.engine.errors import InvalidArgument

DAY = 86400.0


@pytest.mark.parametrize(
    ("text", "policy", "group"),
    [
        ("3", r.Count(3), ""),
        ("24h", r.Window(DAY), ""),
        ("1h30m", r.Window(5400.0), ""),
        ("forever", r.Forever(), ""),
        ("all", r.Forever(), ""),
        ("disabled", r.Disabled(), ""),
        ("context", r.Ref("context"), ""),
        ("parent", r.Ref("parent"), ""),
        ("SYSTEM", r.Ref("system"), ""),
        ("max(24h, 5)", r.Combine("max", (r.Window(DAY), r.Count(5))), ""),
        ("max(24h,5)", r.Combine("max", (r.Window(DAY), r.Count(5))), ""),
        (
            "min(2, max(1h, 10))",
            r.Combine("min", (r.Count(2), r.Combine("max", (r.Window(3600.0), r.Count(10))))),
            "",
        ),
        ("hash deploys 5", r.Count(5), "deploys"),
        ("5 hash deploys", r.Count(5), "deploys"),
        ("hard 5 soft 2", r.Count(5), ""),
        (
            "hash x hard max(context, 6h)",
            r.Combine("max", (r.Ref("context"), r.Window(21600.0))),
            "x",
        ),
    ],
)
def test_grammar(text: str, policy: r.Policy, group: str) -> None:
    parsed = r.parse(text)
    assert (parsed.policy, parsed.hash) == (policy, group)
    assert r.parse(r.render(parsed.policy)).policy == policy  # renders back to itself


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("soon", "'soon' is not a count"),
        ("max(1", "not closed"),
        ("max 1", "needs (…)"),
        ("min(1 2)", "expected , or )"),
        ("3 4", "unexpected '4'"),
        ("hash", "needs a key"),
        ("hash x", "no policy"),
    ],
)
def test_bad_policies_say_why(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        r.parse(text)


def no_refs(name: str) -> r.Policy:
    raise AssertionError(name)


@pytest.mark.parametrize(
    ("text", "rank", "age", "kept"),
    [
        ("3", 2, 1e9, True),
        ("3", 3, 0.0, False),
        ("24h", 99, DAY, True),
        ("24h", 0, DAY + 1, False),
        ("max(24h, 5)", 7, 3600.0, True),  # recent: kept though past the count
        ("max(24h, 5)", 4, 10 * DAY, True),  # old: kept while among the last five
        ("max(24h, 5)", 5, 10 * DAY, False),
        ("min(24h, 5)", 4, 3600.0, True),
        ("min(24h, 5)", 5, 3600.0, False),
        ("min(24h, 5)", 0, 2 * DAY, False),
        ("forever", 10**6, 1e12, True),
        ("disabled", 0, 0.0, False),
    ],
)
def test_what_each_policy_keeps(text: str, rank: int, age: float, kept: bool) -> None:
    assert r.keeps(r.parse(text).policy, rank, age, no_refs) is kept


def test_references_resolve_through_the_callback() -> None:
    policy = r.parse("max(parent, 1)").policy
    assert r.keeps(policy, 3, 0.0, lambda name: r.Count(5))
    assert not r.keeps(policy, 3, 0.0, lambda name: r.Count(2))


def test_context_is_the_policy_before() -> None:
    before = r.parse("2").policy
    now = r.substitute_context(r.parse("max(context, 6h)").policy, before)
    assert now == r.Combine("max", (r.Count(2), r.Window(21600.0)))
