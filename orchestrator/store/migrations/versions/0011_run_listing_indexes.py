"""runs: indexes for listing every run newest first, and by task list

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    # ListWorkflows with no status filter (the web UI's first page) walks these
    # in order instead of sorting every run of the namespace.
    op.create_index("ix_runs_started", "runs", ["namespace", "start_time", "run_id"])
    op.create_index("ix_runs_task_list", "runs", ["namespace", "task_list", "start_time"])


def downgrade() -> None:
    op.drop_index("ix_runs_task_list", table_name="runs")
    op.drop_index("ix_runs_started", table_name="runs")
