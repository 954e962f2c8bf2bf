"""Agents: context_tokens, the size of the request an agent's window makes, kept up to date step by step.

NULL for agents created before: their first step counts their window once.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 04:49:27.253267
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "context_tokens",
                sa.Integer(),
                nullable=True,
                comment="the size of the request its window makes, in tokens; null until counted",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("context_tokens")
