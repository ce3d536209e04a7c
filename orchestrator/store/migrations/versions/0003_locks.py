"""locks and lock_waiters: each lock's holder and its queue in request order

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "locks",
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("lock_name", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("workflow_id", sa.String(length=1000), nullable=False),
        sa.Column("requested_id", sa.BigInteger(), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "lock_name", name=op.f("pk_locks")),
    )
    op.create_table(
        "lock_waiters",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("lock_name", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("workflow_id", sa.String(length=1000), nullable=False),
        sa.Column("requested_id", sa.BigInteger(), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lock_waiters")),
    )
    op.create_index(
        "ix_lock_waiters_queue", "lock_waiters", ["namespace", "lock_name", "id"], unique=False
    )
    op.create_index("ux_lock_waiters_run", "lock_waiters", ["run_id", "lock_name"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_lock_waiters_run", table_name="lock_waiters")
    op.drop_index("ix_lock_waiters_queue", table_name="lock_waiters")
    op.drop_table("lock_waiters")
    op.drop_table("locks")
