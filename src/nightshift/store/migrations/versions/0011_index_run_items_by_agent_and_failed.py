"""Batch items: a run's items indexed by agent (and id), and its failed items on their own.

A run's failed agents (``batch_run_views.runs_failures``) are read through the index of failed items
and checked for a later item of the agent in the run through the index by (run, agent, id),
instead of grouping every item of the run; the second index replaces the one on the run alone.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 10:21:45.075282
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_batch_items_batch_run_id"))
        batch_op.create_index("ix_batch_items_batch_run_id_agent_id", ["batch_run_id", "agent_id", "id"], unique=False)
        batch_op.create_index(
            "ix_batch_items_failed",
            ["batch_run_id"],
            unique=False,
            sqlite_where=sa.text("outcome = 'failed'"),
            postgresql_where=sa.text("outcome = 'failed'"),
        )


def downgrade() -> None:
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_batch_items_failed",
            sqlite_where=sa.text("outcome = 'failed'"),
            postgresql_where=sa.text("outcome = 'failed'"),
        )
        batch_op.drop_index("ix_batch_items_batch_run_id_agent_id")
        batch_op.create_index(batch_op.f("ix_batch_items_batch_run_id"), ["batch_run_id"], unique=False)
