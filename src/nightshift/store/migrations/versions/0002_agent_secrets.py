"""Agents' secrets: environment variables for their custom tool calls.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "secrets",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
                server_default=sa.text("'{}'"),
                nullable=False,
                comment="environment variables of the agent's tool calls; never returned by the API",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("secrets")
