"""What one node tells the others through PostgreSQL NOTIFY: the channels and
the payload format, written by the store (inside the transaction that makes
the news, so that it is delivered on commit only) and read by the dispatcher's
listener (`orchestrator/dispatch/listener.py`).

It lives in the store because the store sends it and the store imports
nothing above itself; the dispatcher imports it from here. The server-side
write function (migrations 0006 and 0007) names the two channels as well.

A notice is a hint and the rows are the truth: a node that misses one (it was
disconnected) wakes all its waiters on reconnect.
"""

from __future__ import annotations

from .rows import TaskListKey

NOTIFY_CHANNEL = "weft_tasks"
"""Tasks were added: "NODE|ADDED|KIND|NAMESPACE|TASK_LIST"."""
CHANGES_CHANNEL = "weft_changes"
"""Other nodes' news besides tasks: "NODE|KIND|SUBJECT"."""

TYPES = "types"
"""A namespace's types were registered (subject: the namespace): forget them."""
CREDENTIALS = "credentials"
"""A credential was added or revoked (subject: its id)."""
CLOSED = "closed"
"""A run closed (subject: its run id): its followers stop waiting."""
WORKER = "worker"
"""A worker session ended (subject: its id): its polls are refused from then on."""


def tasks_added(node: str, key: TaskListKey, added: int, nth: int = 0) -> str:
    """The NOTIFY payload: the sending node, so that it can skip its own (its
    pollers were woken at commit already), and how many pollers to wake.

    PostgreSQL delivers a payload sent twice in one transaction once, so the
    `nth` (from 0) notice of the same list in one transaction carries `nth`
    leading zeros on its count, which reads the same: two runs that add a task
    each to one list, written together, wake two pollers elsewhere."""
    return f"{node}|{'0' * nth}{added}|{key.kind}|{key.namespace}|{key.task_list}"


def read_tasks_added(payload: str) -> tuple[str, int, TaskListKey]:
    """(sending node, tasks added, task list). Names may hold "|": the last field
    takes the rest. ValueError if it is not such a payload."""
    node, added, kind, namespace, task_list = payload.split("|", 4)
    return node, int(added), TaskListKey(namespace, kind, task_list)


def change(node: str, kind: str, subject: str) -> str:
    """A CHANGES_CHANNEL payload."""
    return f"{node}|{kind}|{subject}"


def read_change(payload: str) -> tuple[str, str, str]:
    """(sending node, kind, subject) of a CHANGES_CHANNEL payload; kind is ""
    if it is not one."""
    node, _, rest = payload.partition("|")
    kind, _, subject = rest.partition("|")
    return node, kind, subject


def closed_payload(node: str, run_id: str) -> str:
    """The CHANGES_CHANNEL payload of a run's close."""
    return change(node, CLOSED, run_id)
