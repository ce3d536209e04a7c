"""The pure parts of authentication: per-principal limits, grants, and the
namespace name that grants reserve."""

from __future__ import annotations

import pytest

from orchestrator.api import validate
from orchestrator.auth.gate import PrincipalLimits
from orchestrator.auth.grants import Grant, Refused, Scope
from orchestrator.engine.errors import InvalidArgument, RateLimited, ResourceExhausted


def test_a_rate_under_one_per_two_seconds_still_lets_one_request_through() -> None:
    limits = PrincipalLimits(max_polls=0, rate=0.3)
    limits.spend("key:k_a")
    with pytest.raises(ResourceExhausted, match="request rate"):
        limits.spend("key:k_a")
    limits.spend("key:k_b")  # another principal has its own bucket


def test_the_poll_count_is_given_back_when_the_poll_fails() -> None:
    limits = PrincipalLimits(max_polls=1, rate=0)
    with pytest.raises(RuntimeError), limits.poll("key:k_a"):
        with pytest.raises(ResourceExhausted, match="polls waiting"), limits.poll("key:k_a"):
            pass
        raise RuntimeError("the handler failed")
    with limits.poll("key:k_a"):  # free again
        pass


def test_every_namespace_grants_need_admin_of_star_for_purges() -> None:
    Grant("*", "admin").check("PurgeClosedRuns", Scope())
    with pytest.raises(Refused, match="every namespace"):
        Grant("default", "admin").check("PurgeClosedRuns", Scope())


def test_narrowings_refuse_what_they_do_not_name_and_ignore_what_the_call_lacks() -> None:
    worker = Grant("default", "worker", task_lists=frozenset({"pci"}))
    worker.check("PollForActivityTask", Scope(namespace="default", task_list="pci"))
    with pytest.raises(Refused, match="task lists"):
        worker.check("PollForActivityTask", Scope(namespace="default", task_list="orders"))
    with pytest.raises(Refused, match="task lists"):  # a registration without a list
        worker.check("RegisterActivityType", Scope(namespace="default", task_list=""))
    worker.check("DescribeNamespace", Scope(namespace="default"))
    with pytest.raises(Refused, match="namespace"):
        worker.check("PollForActivityTask", Scope(namespace="other", task_list="pci"))


def test_star_is_not_a_namespace_name() -> None:
    with pytest.raises(InvalidArgument, match="every namespace"):
        validate.namespace("*")
    assert validate.namespace("") == "default"


def test_a_rate_refusal_says_how_long_until_the_next_request_is_let_in() -> None:
    limits = PrincipalLimits(max_polls=0, rate=4.0)
    for _ in range(8):  # the bucket: two seconds' worth
        limits.spend("key:k_a")
    with pytest.raises(RateLimited) as info:
        limits.spend("key:k_a")
    # At most a quarter second at 4/s; as much less as refilled meanwhile.
    assert 0 < info.value.retry_after <= 0.25
    assert info.value.code_name == "RESOURCE_EXHAUSTED"
