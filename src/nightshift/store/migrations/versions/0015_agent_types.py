"""Agents keep their type (Letta's ``agent_type``): it says which loop they run.

Agents made before it was kept ran the memgpt loop, so they take ``memgpt_v2_agent``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 11:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch: on SQLite a batch would copy the table and drop the old one,
    # and with foreign keys on, dropping agents deletes what references them.
    op.add_column(
        "agents",
        sa.Column(
            "agent_type",
            sa.String(length=64),
            server_default="memgpt_v2_agent",
            nullable=False,
            comment=("the loop it runs (Letta's agent_type); agents made before it was kept ran the memgpt loop"),
        ),
    )


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("agent_type")
