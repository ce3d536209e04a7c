"""initial schema

Revision ID: 0001
Revises:
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "activity_types",
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("version", sa.String(length=255), nullable=False),
        sa.Column("default_task_list", sa.String(length=255), nullable=False),
        sa.Column("default_schedule_to_start", sa.Float(), nullable=True),
        sa.Column("default_start_to_close", sa.Float(), nullable=True),
        sa.Column("default_schedule_to_close", sa.Float(), nullable=True),
        sa.Column("default_heartbeat", sa.Float(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("registered_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", "version", name=op.f("pk_activity_types")),
    )
    op.create_table(
        "deadlines",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("ref_id", sa.BigInteger(), nullable=False),
        sa.Column("due", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "kind", "ref_id", name=op.f("pk_deadlines")),
    )
    with op.batch_alter_table("deadlines", schema=None) as batch_op:
        batch_op.create_index("ix_deadlines_due", ["due"], unique=False)

    op.create_table(
        "history_events",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("timestamp", sa.DateTime(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "event_id", name=op.f("pk_history_events")),
    )
    op.create_table(
        "pollers",
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("task_list", sa.String(length=255), nullable=False),
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint(
            "namespace", "kind", "task_list", "identity", name=op.f("pk_pollers")
        ),
    )
    op.create_table(
        "request_ids",
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("workflow_id", sa.String(length=1000), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint(
            "namespace", "workflow_id", "kind", "request_id", name=op.f("pk_request_ids")
        ),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("workflow_id", sa.String(length=1000), nullable=False),
        sa.Column("workflow_type", sa.String(length=255), nullable=False),
        sa.Column("task_list", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("start_time", sa.DateTime(), nullable=False),
        sa.Column("close_time", sa.DateTime(), nullable=True),
        sa.Column("history_length", sa.BigInteger(), nullable=False),
        sa.Column("continued_from_run_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_listing", ["namespace", "status", "start_time"], unique=False
        )
        batch_op.create_index(
            "ix_runs_workflow", ["namespace", "workflow_id", "start_time"], unique=False
        )
        batch_op.create_index(
            "ux_runs_open_workflow",
            ["namespace", "workflow_id"],
            unique=True,
            sqlite_where=sa.text("status = 'open'"),
            postgresql_where=sa.text("status = 'open'"),
        )

    op.create_table(
        "server_meta",
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_server_meta")),
    )
    op.create_table(
        "tasks",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("task_list", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("scheduled_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tasks_poll", ["namespace", "kind", "task_list", "id"], unique=False
        )
        batch_op.create_index("ux_tasks_run", ["run_id", "kind", "scheduled_id"], unique=True)

    op.create_table(
        "workflow_types",
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("version", sa.String(length=255), nullable=False),
        sa.Column("default_task_list", sa.String(length=255), nullable=False),
        sa.Column("default_execution_timeout", sa.Float(), nullable=True),
        sa.Column("default_decider_timeout", sa.Float(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("registered_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", "version", name=op.f("pk_workflow_types")),
    )


def downgrade() -> None:
    op.drop_table("workflow_types")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ux_tasks_run")
        batch_op.drop_index("ix_tasks_poll")

    op.drop_table("tasks")
    op.drop_table("server_meta")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(
            "ux_runs_open_workflow",
            sqlite_where=sa.text("status = 'open'"),
            postgresql_where=sa.text("status = 'open'"),
        )
        batch_op.drop_index("ix_runs_workflow")
        batch_op.drop_index("ix_runs_listing")

    op.drop_table("runs")
    op.drop_table("request_ids")
    op.drop_table("pollers")
    op.drop_table("history_events")
    with op.batch_alter_table("deadlines", schema=None) as batch_op:
        batch_op.drop_index("ix_deadlines_due")

    op.drop_table("deadlines")
    op.drop_table("activity_types")
