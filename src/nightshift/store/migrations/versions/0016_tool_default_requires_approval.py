"""Approvals: a tool may ask that every call of it be approved (an agent given it gets a
requires_approval rule), and a queued run's request keeps its client-side tools and whether it
answered the agent's approval request.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs, not batches: on SQLite a batch would copy each table and drop the old one,
    # and with foreign keys on, dropping tools deletes every agent's link to them.
    op.add_column(
        "tools",
        sa.Column(
            "default_requires_approval",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
            comment="an agent given the tool gets a requires_approval rule for it",
        ),
    )
    op.add_column(
        "batch_run_requests",
        sa.Column(
            "client_tools",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
            comment="the tools the client runs itself, offered for the run",
        ),
    )
    op.add_column(
        "batch_run_requests",
        sa.Column(
            "answered",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
            comment="the request answered the agent's approval request: its first step starts with a heartbeat",
        ),
    )


def downgrade() -> None:
    with op.batch_alter_table("batch_run_requests") as batch:
        batch.drop_column("answered")
        batch.drop_column("client_tools")
    with op.batch_alter_table("tools") as batch:
        batch.drop_column("default_requires_approval")
