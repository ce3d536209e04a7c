"""workflow_types.definition: a step workflow's registered YAML

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    # Types registered before this revision have no definition: "" (decided by code).
    with op.batch_alter_table("workflow_types", schema=None) as batch_op:
        batch_op.add_column(sa.Column("definition", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("workflow_types", schema=None) as batch_op:
        batch_op.drop_column("definition")
