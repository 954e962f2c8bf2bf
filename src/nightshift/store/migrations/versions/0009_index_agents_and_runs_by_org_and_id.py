"""index agents and runs by organization and id

A page of agents or runs is ordered by id within an organization, and agents are loaded by id
within theirs: on (organization_id, name) or (organization_id, status) alone, SQLite read every
agent (or run) of the organization for each of those reads.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 06:18:58.576584
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.create_index("ix_agents_org_id", ["organization_id", "id"], unique=False)

    with op.batch_alter_table("batch_runs", schema=None) as batch_op:
        batch_op.create_index("ix_batch_runs_org_id", ["organization_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("batch_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_batch_runs_org_id")

    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_index("ix_agents_org_id")
