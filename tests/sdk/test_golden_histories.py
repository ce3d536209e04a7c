"""Golden histories: real runs of the examples, saved with `weft history ID --json`
(tests/golden/order.json and order_canceled.json), replayed through the example
deciders. Each decision task of the recording must get the same decisions again;
a decider whose logic drifted (here: one that charges before it reserves) is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.order import Order
from sdk import DecisionTask, NonDeterminismError
from sdk.events import Event, events_from_json
from sdk.testing import replay

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def load(name: str) -> list[Event]:
    return events_from_json(json.loads((GOLDEN / name).read_text()))


@pytest.mark.parametrize(
    ("name", "tasks", "close"),
    [("order.json", 5, "WorkflowSuccess"), ("order_canceled.json", 4, "WorkflowCanceled")],
)
def test_the_order_decider_replays_its_recorded_histories(
    name: str, tasks: int, close: str
) -> None:
    history = load(name)
    assert history[-1].type == close
    assert replay(Order(), history) == tasks


class ChargeFirst(Order):
    """The order decider with its first two decisions swapped."""

    def decide(self, task: DecisionTask) -> None:
        super().decide(task)
        if len(task.decisions) == 2:
            task.decisions.reverse()


def test_a_changed_decider_is_caught_as_non_deterministic() -> None:
    with pytest.raises(NonDeterminismError, match=r"decision 1 .*'charge'.*'reserve'"):
        replay(ChargeFirst(), load("order.json"))
