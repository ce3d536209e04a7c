"""An order, the shape of SWF's example (seed 002): reserve the stock (A) and
charge the card (B) in parallel, then ship (C), then wait for the carrier to
signal `delivered`.

Charging a card is PCI work, so `charge-card` runs on its own task list, `pci`,
served by its own runner; everything else is on `orders`:

    weft decider examples.order
    weft runner --task-list orders examples.order
    weft runner --task-list pci examples.order
    weft start order --id order-1 --input '{"sku": "book", "quantity": 1, "amount": 12.5}'
    python -m examples.carrier order-1          # or: weft signal order-1 delivered

Failed or timed-out activities are retried up to three attempts, unless the
failure says retrying cannot help. A cancel request cancels what is running
and closes the order as canceled.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from sdk import ActivityCancelledError, Decider, DecisionTask, NonRetryableError, activity
from sdk.activity import ActivityDefinition

ATTEMPTS = 3


@activity(name="reserve-stock", task_list="orders", start_to_close=timedelta(seconds=30))
def reserve_stock(order: dict[str, Any]) -> dict[str, Any]:
    if order.get("quantity", 1) <= 0:
        raise NonRetryableError(f"cannot reserve {order.get('quantity')} of {order.get('sku')}")
    return {"reservation": f"R-{uuid.uuid4().hex[:8]}", "sku": order.get("sku")}


@activity(
    name="charge-card",
    task_list="pci",
    start_to_close=timedelta(minutes=2),
    heartbeat=timedelta(seconds=3),
)
def charge_card(order: dict[str, Any]) -> dict[str, Any]:
    """Talk to the card processor; `processing_seconds` in the order simulates a
    slow one. Heartbeats let the server notice a dead runner within 3 s."""
    deadline = time.monotonic() + float(order.get("processing_seconds", 0.1))
    while time.monotonic() < deadline:
        activity.heartbeat({"waiting_for": "processor"})
        if activity.is_cancelled():
            raise ActivityCancelledError("charge abandoned: the order was canceled")
        time.sleep(0.1)
    return {"charge": f"CH-{uuid.uuid4().hex[:8]}", "amount": order.get("amount", 0)}


@activity(name="ship", task_list="orders", start_to_close=timedelta(seconds=30))
async def ship(shipment: dict[str, Any]) -> dict[str, Any]:
    return {"tracking": f"TRK-{uuid.uuid4().hex[:8]}", "reservation": shipment["reservation"]}


class Order(Decider):
    workflow_type = "order"
    task_list = "orders"

    def decide(self, task: DecisionTask) -> None:
        if task.cancel_requested:
            for act in task.open_activities:
                if act.status != "cancel_requested":
                    task.cancel_activity(act.activity_id)
            if not task.open_activities:
                task.cancel({"reason": "canceled on request"})
            return

        order = task.input
        for activity_id, fn in (("reserve", reserve_stock), ("charge", charge_card)):
            if not self._run(task, activity_id, fn, order):
                return
        reserve, charge = task.activities.get("reserve"), task.activities.get("charge")
        if not (reserve and charge and reserve.status == charge.status == "succeeded"):
            return  # A and B not both done yet

        shipment = {**order, **reserve.result, **charge.result}
        if not self._run(task, "ship", ship, shipment):
            return
        shipped = task.activities.get("ship")
        if shipped is None or shipped.status != "succeeded":
            return

        delivered = task.signals("delivered")
        if delivered:
            task.complete(
                {
                    "order": order,
                    "charge": charge.result["charge"],
                    "tracking": shipped.result["tracking"],
                    "delivered": delivered[0].input,
                }
            )

    def _run(
        self, task: DecisionTask, activity_id: str, fn: ActivityDefinition, input: Any
    ) -> bool:
        """Schedule the activity the first time, retry it after a failure; False when
        the workflow has failed for good."""
        act = task.activities.get(activity_id)
        if act is None:
            task.schedule_activity(activity_id, fn, input)
        elif act.status in ("failed", "timed_out"):
            failure = act.failure
            give_up = act.attempts >= ATTEMPTS or (failure is not None and failure.non_retryable)
            if give_up:
                reason = f"{activity_id} failed after {act.attempts} attempts"
                task.fail(reason, {"activity": activity_id, "failure": failure and failure.message})
                return False
            task.schedule_activity(activity_id, fn, input)
        return True
