"""The outside systems of the `provision-vm` step workflow
(`examples/steps/provision-vm.yaml`), faked as activities: an approvals
service that answers a request after a few checks, and a cloud that takes a
few checks to bring a VM up. Seed 000 tells this flow against real HTTP
services; here each call is an activity so the example runs on one machine:

    weft decider --definitions examples/steps
    weft runner --task-list provisioning examples.approvals
    weft start provision-vm --id vm-1 --input '{"owner": "ada", "size": "small"}' --wait

Requests for `size: huge` are denied. State lives in the runner process (a
request it never saw counts as decided), which is all a demo needs.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sdk import NonRetryableError, activity

TASK_LIST = "provisioning"
# How many checks a request or a VM takes before it is done.
CHECKS_TO_DECIDE = 2
CHECKS_TO_BOOT = 2

_approvals: dict[str, dict[str, Any]] = {}
_machines: dict[str, dict[str, Any]] = {}


@activity(name="request-approval", task_list=TASK_LIST, start_to_close=timedelta(seconds=30))
def request_approval(request: dict[str, Any]) -> dict[str, Any]:
    """File a request with the approvals service; answers its id."""
    owner = str(request.get("owner") or "")
    if not owner:
        raise NonRetryableError("an approval request needs an owner")
    request_id = f"REQ-{uuid.uuid4().hex[:8]}"
    denied = request.get("size") == "huge"
    _approvals[request_id] = {"checks": 0, "approved": not denied, "owner": owner}
    return {"request_id": request_id}


@activity(name="check-approval", task_list=TASK_LIST, start_to_close=timedelta(seconds=30))
def check_approval(request: dict[str, Any]) -> dict[str, Any]:
    """`{completed, approved, details}`: not completed until it has been asked
    a few times, as a human approver takes a while."""
    state = _approvals.get(str(request.get("request_id")))
    if state is None:
        return {"completed": True, "approved": True, "details": "approved (unknown to this runner)"}
    state["checks"] += 1
    if state["checks"] < CHECKS_TO_DECIDE:
        return {"completed": False, "approved": False, "details": "waiting for an approver"}
    verdict = "approved" if state["approved"] else "denied: huge VMs need a budget review"
    return {"completed": True, "approved": state["approved"], "details": verdict}


@activity(name="provision-vm", task_list=TASK_LIST, start_to_close=timedelta(seconds=30))
def provision_vm(request: dict[str, Any]) -> dict[str, Any]:
    """Ask the cloud for a VM; answers the provisioning id at once."""
    provision_id = f"PRV-{uuid.uuid4().hex[:8]}"
    _machines[provision_id] = {"checks": 0, "size": request.get("size", "small")}
    return {"provision_id": provision_id}


@activity(name="check-provision", task_list=TASK_LIST, start_to_close=timedelta(seconds=30))
def check_provision(request: dict[str, Any]) -> dict[str, Any]:
    """`{completed, id, ip_address}` once the VM is up."""
    provision_id = str(request.get("provision_id"))
    state = _machines.setdefault(provision_id, {"checks": CHECKS_TO_BOOT, "size": "small"})
    state["checks"] += 1
    if state["checks"] < CHECKS_TO_BOOT:
        return {"completed": False, "id": None, "ip_address": None}
    number = int(provision_id.removeprefix("PRV-")[:2], 16)
    return {"completed": True, "id": f"vm-{provision_id[4:]}", "ip_address": f"10.0.0.{number}"}
