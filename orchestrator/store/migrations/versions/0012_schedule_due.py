"""schedules: when each is next due, so a pass reads only the schedules due

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    # NULL: look at it at the next pass (every schedule stored before this).
    op.add_column("schedules", sa.Column("due_at", sa.DateTime(), nullable=True))
    op.create_index("ix_schedules_due", "schedules", ["due_at"])
    # The few schedules keeping a slot until a run closes, read every pass.
    where = sa.text("buffered_slot IS NOT NULL")
    op.create_index(
        "ix_schedules_buffered",
        "schedules",
        ["buffered_slot"],
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index("ix_schedules_buffered", table_name="schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_column("schedules", "due_at")
