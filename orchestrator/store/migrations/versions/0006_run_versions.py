"""runs.version, and on PostgreSQL the functions that write one transition of one
run in one call: weft_apply (a run as it stands) and weft_create (a new run)

A run's row carries a version that every write bumps, so a node that kept the
run's state in memory writes on it only if nobody wrote since
(compare-and-set), instead of locking the row and reading it back first. Each
function is one round trip and one transaction in autocommit: the run row,
its events, the task, deadline and request-id rows, and the task notifications.

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# What both functions write after the run row: events, tasks, deadlines, the
# request id that makes a retried call do nothing, and NOTIFYs for the tasks.
WRITE_REST = """
CREATE OR REPLACE FUNCTION weft_write_rest(
    p_run_id varchar,
    p_ev_ids bigint[], p_ev_types varchar[], p_ev_times timestamp[], p_ev_data bytea[],
    p_task_del_kinds varchar[], p_task_del_ids bigint[],
    p_task_namespace varchar, p_task_kinds varchar[], p_task_lists varchar[],
    p_task_ids bigint[], p_task_time timestamp,
    p_dl_del_kinds varchar[], p_dl_del_refs bigint[],
    p_dl_kinds varchar[], p_dl_refs bigint[], p_dl_dues timestamp[],
    p_request varchar[], p_notify text[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(p_ev_ids) > 0 THEN
        INSERT INTO history_events (run_id, event_id, event_type, timestamp, data)
        SELECT p_run_id, e.id, e.kind, e.at, e.data
        FROM unnest(p_ev_ids, p_ev_types, p_ev_times, p_ev_data) AS e(id, kind, at, data);
    END IF;
    IF cardinality(p_task_del_ids) > 0 THEN
        DELETE FROM tasks t
        USING unnest(p_task_del_kinds, p_task_del_ids) AS d(kind, sid)
        WHERE t.run_id = p_run_id AND t.kind = d.kind AND t.scheduled_id = d.sid;
    END IF;
    IF cardinality(p_task_ids) > 0 THEN
        INSERT INTO tasks (namespace, kind, task_list, run_id, scheduled_id, created_at)
        SELECT p_task_namespace, a.kind, a.list, p_run_id, a.sid, p_task_time
        FROM unnest(p_task_kinds, p_task_lists, p_task_ids) WITH ORDINALITY AS a(kind, list, sid, n)
        ORDER BY a.n;
    END IF;
    IF cardinality(p_dl_del_refs) > 0 THEN
        DELETE FROM deadlines dl
        USING unnest(p_dl_del_kinds, p_dl_del_refs) AS d(kind, ref)
        WHERE dl.run_id = p_run_id AND dl.kind = d.kind AND dl.ref_id = d.ref;
    END IF;
    IF cardinality(p_dl_refs) > 0 THEN
        INSERT INTO deadlines (run_id, kind, ref_id, due)
        SELECT p_run_id, a.kind, a.ref, a.due
        FROM unnest(p_dl_kinds, p_dl_refs, p_dl_dues) AS a(kind, ref, due);
    END IF;
    IF cardinality(p_request) = 4 THEN
        INSERT INTO request_ids (namespace, workflow_id, kind, request_id, run_id, created_at)
        VALUES (p_request[1], p_request[2], p_request[3], p_request[4], p_run_id, p_task_time);
    END IF;
    IF cardinality(p_notify) > 0 THEN
        PERFORM pg_notify('weft_tasks', n) FROM unnest(p_notify) AS n;
    END IF;
END $$;
"""

APPLY = """
CREATE OR REPLACE FUNCTION weft_apply(
    p_run_id varchar, p_version bigint,
    p_status varchar, p_close_time timestamp, p_history_length bigint, p_state text,
    p_ev_ids bigint[], p_ev_types varchar[], p_ev_times timestamp[], p_ev_data bytea[],
    p_task_del_kinds varchar[], p_task_del_ids bigint[],
    p_task_namespace varchar, p_task_kinds varchar[], p_task_lists varchar[],
    p_task_ids bigint[], p_task_time timestamp,
    p_dl_del_kinds varchar[], p_dl_del_refs bigint[],
    p_dl_kinds varchar[], p_dl_refs bigint[], p_dl_dues timestamp[],
    p_request varchar[], p_notify text[]
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs
    SET status = p_status, close_time = p_close_time, history_length = p_history_length,
        state = p_state, version = version + 1
    WHERE run_id = p_run_id AND version = p_version;
    IF NOT FOUND THEN
        RETURN false;  -- someone wrote since this state was read: nothing is written
    END IF;
    PERFORM weft_write_rest(
        p_run_id, p_ev_ids, p_ev_types, p_ev_times, p_ev_data,
        p_task_del_kinds, p_task_del_ids,
        p_task_namespace, p_task_kinds, p_task_lists, p_task_ids, p_task_time,
        p_dl_del_kinds, p_dl_del_refs, p_dl_kinds, p_dl_refs, p_dl_dues,
        p_request, p_notify);
    RETURN true;
END $$;
"""

CREATE = """
CREATE OR REPLACE FUNCTION weft_create(
    p_run_id varchar, p_namespace varchar, p_workflow_id varchar, p_workflow_type varchar,
    p_task_list varchar, p_start_time timestamp, p_links varchar[],
    p_status varchar, p_close_time timestamp, p_history_length bigint, p_state text,
    p_ev_ids bigint[], p_ev_types varchar[], p_ev_times timestamp[], p_ev_data bytea[],
    p_task_del_kinds varchar[], p_task_del_ids bigint[],
    p_task_namespace varchar, p_task_kinds varchar[], p_task_lists varchar[],
    p_task_ids bigint[], p_task_time timestamp,
    p_dl_del_kinds varchar[], p_dl_del_refs bigint[],
    p_dl_kinds varchar[], p_dl_refs bigint[], p_dl_dues timestamp[],
    p_request varchar[], p_notify text[]
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
    PERFORM weft_write_rest(
        p_run_id, p_ev_ids, p_ev_types, p_ev_times, p_ev_data,
        p_task_del_kinds, p_task_del_ids,
        p_task_namespace, p_task_kinds, p_task_lists, p_task_ids, p_task_time,
        p_dl_del_kinds, p_dl_del_refs, p_dl_kinds, p_dl_refs, p_dl_dues,
        p_request, p_notify);
    RETURN true;
END $$;
"""


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("version", sa.BigInteger(), nullable=False, server_default="0")
        )
    if op.get_bind().dialect.name == "postgresql":
        for body in (WRITE_REST, APPLY, CREATE):
            op.execute(body)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS weft_create")
        op.execute("DROP FUNCTION IF EXISTS weft_apply")
        op.execute("DROP FUNCTION IF EXISTS weft_write_rest")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("version")
