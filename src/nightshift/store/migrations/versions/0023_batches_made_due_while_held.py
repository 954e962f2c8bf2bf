"""A batch made due while a process holds it stays due when that process gives its lease back.

``provider_batches.woken_at`` is when another process made the batch due at once: the provider's
webhook said it ended, or its agents all left it (to be cancelled at the provider). A poller that
gave its lease back (after submitting the batch, or a poll that found it still running) used to
set the next poll from its schedule alone, over that "due now", and the step or the cancel then
waited for the schedule. The release now keeps the batch due from ``woken_at``; a claim clears it.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 11:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import nightshift.store.tables

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "provider_batches",
        sa.Column(
            "woken_at",
            nightshift.store.tables.UTCDateTime(timezone=True),
            nullable=True,
            comment="when another process made it due at once (a webhook, a cancel): a lease given back keeps it so",
        ),
    )


def downgrade() -> None:
    with op.batch_alter_table("provider_batches") as batch_op:
        batch_op.drop_column("woken_at")
