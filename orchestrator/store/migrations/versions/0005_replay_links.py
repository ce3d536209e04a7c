"""runs.replay_of_run_id and runs.replayed_by_run_id: a replayed closed run and
the run that replays it, linked both ways

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name in ("replay_of_run_id", "replayed_by_run_id"):
            batch_op.add_column(
                sa.Column(name, sa.String(length=64), nullable=False, server_default="")
            )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("replayed_by_run_id")
        batch_op.drop_column("replay_of_run_id")
