"""How much to run: `make bench QUICK=1` (under two minutes) or the full set."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    workflows: int  # N, per timed batch
    steps: int  # K trivial activities (or DBOS steps) per workflow
    inflight: tuple[int, ...]  # workflows in flight, for throughput and the peer
    repeats: int  # timed batches per point; figures are their medians
    warmup_workflows: int  # one untimed batch before the repeats of each point
    limit_seconds: float  # length of one bare-append / echo measurement
    limit_warmup: float
    history_sizes: tuple[int, ...]
    growth_repeats: int
    dispatch_repeats: int
    steps_inflight: tuple[int, ...]
    sqlite_inflight: tuple[int, ...]


# Weft on this 2-core machine runs a few dozen trivial activities a second, so
# the batches are sized in workflows, not minutes: QUICK stays under two
# minutes, FULL takes about ten.
QUICK = Profile(
    name="quick",
    workflows=10,
    steps=5,
    inflight=(1, 4, 16),
    repeats=3,
    warmup_workflows=4,
    limit_seconds=0.5,
    limit_warmup=0.2,
    history_sizes=(10, 1_000, 10_000),
    growth_repeats=5,
    dispatch_repeats=9,
    steps_inflight=(4,),
    sqlite_inflight=(4,),
)

FULL = Profile(
    name="full",
    workflows=60,
    steps=5,
    inflight=(1, 4, 16),
    repeats=5,
    warmup_workflows=16,
    limit_seconds=2.0,
    limit_warmup=0.5,
    history_sizes=(10, 1_000, 10_000),
    growth_repeats=15,
    dispatch_repeats=30,
    steps_inflight=(4,),
    sqlite_inflight=(4,),
)
