"""workers and nodes: worker sessions, the runs their tasks are in, server
nodes and the upkeep lease

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "worker_sessions",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.BigInteger(), nullable=False),
        sa.Column("task_lists", sa.Text(), nullable=False),
        sa.Column("build_id", sa.String(length=255), nullable=False),
        sa.Column("principal", sa.String(length=255), nullable=False),
        sa.Column("timeout", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("registered_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_worker_sessions")),
    )
    op.create_index(
        op.f("ix_worker_sessions_status_expires_at"),
        "worker_sessions",
        ["status", "expires_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_worker_sessions_namespace_registered_at"),
        "worker_sessions",
        ["namespace", "registered_at"],
        unique=False,
    )
    op.create_table(
        "worker_runs",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "run_id", name=op.f("pk_worker_runs")),
    )
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.BigInteger(), nullable=False),
        sa.Column("listen", sa.String(length=255), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("unexpected_shutdowns", sa.BigInteger(), nullable=False),
        sa.Column("last_unexpected_shutdown", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_nodes")),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("nodes")
    op.drop_table("worker_runs")
    op.drop_index(op.f("ix_worker_sessions_namespace_registered_at"), table_name="worker_sessions")
    op.drop_index(op.f("ix_worker_sessions_status_expires_at"), table_name="worker_sessions")
    op.drop_table("worker_sessions")
