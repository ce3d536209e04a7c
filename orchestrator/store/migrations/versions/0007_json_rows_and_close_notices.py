"""PostgreSQL: the transition functions take their rows as one JSON document,
and tell other nodes when a run closes

The functions of 0006 took a parameter per column; building and sending those
cost the node more than the write itself. These take the rows as one JSON
argument and the event bodies as one bytea array. A run's close is also sent
on weft_changes, so a `result()` or history follow waiting on another node
wakes at once instead of at its next re-check.

Revision ID: 0007
Revises: 0006
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# What both functions write after the run row, from `p_rows` (a JSON document,
# much cheaper for the node to build and send than a parameter per column):
#   ev     [[event id, type], ...]     with p_ev_data[i], all stamped `at`
#   tdel   [[kind, scheduled id], ...] task rows that go
#   tadd   [[kind, task list, scheduled id], ...] in `ns`, created `at`
#   ddel   [[kind, ref id], ...]       deadline rows that go
#   dadd   [[kind, ref id, due], ...]
#   req    [namespace, workflow id, kind, request id] or null
#   notify [payload, ...]              NOTIFYs on weft_tasks (tasks added)
#   changes [payload, ...]             NOTIFYs on weft_changes (a run closed)
WRITE_REST = """
CREATE FUNCTION weft_write_rest(p_run_id varchar, p_rows jsonb, p_ev_data bytea[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    at timestamp := (p_rows->>'at')::timestamp;
BEGIN
    IF jsonb_array_length(p_rows->'ev') > 0 THEN
        INSERT INTO history_events (run_id, event_id, event_type, timestamp, data)
        SELECT p_run_id, (e.v->>0)::bigint, e.v->>1, at, p_ev_data[e.n]
        FROM jsonb_array_elements(p_rows->'ev') WITH ORDINALITY AS e(v, n);
    END IF;
    IF jsonb_array_length(p_rows->'tdel') > 0 THEN
        DELETE FROM tasks t
        USING jsonb_array_elements(p_rows->'tdel') AS d(v)
        WHERE t.run_id = p_run_id AND t.kind = d.v->>0 AND t.scheduled_id = (d.v->>1)::bigint;
    END IF;
    IF jsonb_array_length(p_rows->'tadd') > 0 THEN
        INSERT INTO tasks (namespace, kind, task_list, run_id, scheduled_id, created_at)
        SELECT p_rows->>'ns', a.v->>0, a.v->>1, p_run_id, (a.v->>2)::bigint, at
        FROM jsonb_array_elements(p_rows->'tadd') WITH ORDINALITY AS a(v, n)
        ORDER BY a.n;
    END IF;
    IF jsonb_array_length(p_rows->'ddel') > 0 THEN
        DELETE FROM deadlines dl
        USING jsonb_array_elements(p_rows->'ddel') AS d(v)
        WHERE dl.run_id = p_run_id AND dl.kind = d.v->>0 AND dl.ref_id = (d.v->>1)::bigint;
    END IF;
    IF jsonb_array_length(p_rows->'dadd') > 0 THEN
        INSERT INTO deadlines (run_id, kind, ref_id, due)
        SELECT p_run_id, a.v->>0, (a.v->>1)::bigint, (a.v->>2)::timestamp
        FROM jsonb_array_elements(p_rows->'dadd') AS a(v);
    END IF;
    IF jsonb_typeof(p_rows->'req') = 'array' THEN
        INSERT INTO request_ids (namespace, workflow_id, kind, request_id, run_id, created_at)
        VALUES (p_rows->'req'->>0, p_rows->'req'->>1, p_rows->'req'->>2, p_rows->'req'->>3,
                p_run_id, at);
    END IF;
    IF jsonb_array_length(p_rows->'notify') > 0 THEN
        PERFORM pg_notify('weft_tasks', n) FROM jsonb_array_elements_text(p_rows->'notify') AS n;
    END IF;
    IF jsonb_array_length(COALESCE(p_rows->'changes', '[]'::jsonb)) > 0 THEN
        PERFORM pg_notify('weft_changes', n)
        FROM jsonb_array_elements_text(p_rows->'changes') AS n;
    END IF;
END $$;
"""

APPLY = """
CREATE FUNCTION weft_apply(
    p_run_id varchar, p_version bigint,
    p_status varchar, p_close_time timestamp, p_history_length bigint, p_state text,
    p_rows jsonb, p_ev_data bytea[]
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs
    SET status = p_status, close_time = p_close_time, history_length = p_history_length,
        state = p_state, version = version + 1
    WHERE run_id = p_run_id AND version = p_version;
    IF NOT FOUND THEN
        RETURN false;  -- someone wrote since this state was read: nothing is written
    END IF;
    PERFORM weft_write_rest(p_run_id, p_rows, p_ev_data);
    RETURN true;
END $$;
"""

CREATE = """
CREATE FUNCTION weft_create(
    p_run_id varchar, p_namespace varchar, p_workflow_id varchar, p_workflow_type varchar,
    p_task_list varchar, p_start_time timestamp, p_links varchar[],
    p_status varchar, p_close_time timestamp, p_history_length bigint, p_state text,
    p_rows jsonb, p_ev_data bytea[]
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    -- A second open run of the workflow id violates ux_runs_open_workflow: the
    -- whole call fails and nothing is written.
    INSERT INTO runs (
        run_id, namespace, workflow_id, workflow_type, task_list, status, start_time,
        close_time, history_length, continued_from_run_id, parent_run_id,
        replay_of_run_id, state, version)
    VALUES (
        p_run_id, p_namespace, p_workflow_id, p_workflow_type, p_task_list, p_status,
        p_start_time, p_close_time, p_history_length, p_links[1], p_links[2], p_links[3],
        p_state, 1);
    PERFORM weft_write_rest(p_run_id, p_rows, p_ev_data);
    RETURN true;
END $$;
"""


_DROP = (
    "DROP FUNCTION IF EXISTS weft_create",
    "DROP FUNCTION IF EXISTS weft_apply",
    "DROP FUNCTION IF EXISTS weft_write_rest",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in (*_DROP, WRITE_REST, APPLY, CREATE):
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in _DROP:
        op.execute(statement)
    # Back to 0006's functions, as that revision defines them.
    path = Path(__file__).with_name("0006_run_versions.py")
    spec = importlib.util.spec_from_file_location("weft_migration_0006", path)
    assert spec is not None and spec.loader is not None
    previous = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(previous)
    for body in (previous.WRITE_REST, previous.APPLY, previous.CREATE):
        op.execute(body)
