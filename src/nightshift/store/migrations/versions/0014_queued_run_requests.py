"""A new run is queued: its requests are kept until a poller writes its first step from them.

``POST /v1/messages/batches`` writes the run and one row per agent here, and answers; a poller
claims the run, writes its first step and deletes these rows in one transaction. An agent with a
row here is reserved, as one in an open step is.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 08:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "batch_run_requests",
        sa.Column("batch_run_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False, comment="the request's place in the run's body"),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column(
            "messages",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
            comment="the user's messages: texts, or text and images",
        ),
        sa.Column("max_steps", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_run_id"],
            ["batch_runs.id"],
            name=op.f("fk_batch_run_requests_batch_run_id_batch_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("batch_run_id", "position", name=op.f("pk_batch_run_requests")),
    )
    op.create_index("ix_batch_run_requests_agent_id", "batch_run_requests", ["agent_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_batch_run_requests_agent_id", table_name="batch_run_requests")
    op.drop_table("batch_run_requests")
