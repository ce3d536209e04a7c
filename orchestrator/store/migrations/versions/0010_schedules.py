"""schedules: cron and every schedules that start runs

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("workflow_type", sa.String(length=255), nullable=False),
        sa.Column("task_list", sa.String(length=255), nullable=False),
        sa.Column("input", sa.LargeBinary(), nullable=True),
        sa.Column("cron", sa.String(length=255), nullable=False),
        sa.Column("every", sa.Float(), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("overlap", sa.String(length=32), nullable=False),
        sa.Column("catch_up_window", sa.Float(), nullable=False),
        sa.Column("jitter", sa.Float(), nullable=False),
        sa.Column("start_at", sa.DateTime(), nullable=True),
        sa.Column("end_at", sa.DateTime(), nullable=True),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("last_slot", sa.DateTime(), nullable=True),
        sa.Column("buffered_slot", sa.DateTime(), nullable=True),
        sa.Column("pending", sa.Text(), nullable=False),
        sa.Column("started", sa.BigInteger(), nullable=False),
        sa.Column("skipped", sa.BigInteger(), nullable=False),
        sa.Column("missed", sa.BigInteger(), nullable=False),
        sa.Column("recent", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_schedules")),
    )


def downgrade() -> None:
    op.drop_table("schedules")
