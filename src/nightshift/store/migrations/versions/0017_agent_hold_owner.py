"""Agents: stepping_run_id, the agent run whose synchronous step holds the agent.

A cancelled run lets go of its agent at once; the step still in flight then ends without writing,
and must not let go of a hold that a later run took meanwhile: the hold names its run. NULL for
holds taken before (they are let go of as before).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 11:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "stepping_run_id",
                sa.String(length=64),
                nullable=True,
                comment="the agent run whose synchronous step holds the agent",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("stepping_run_id")
