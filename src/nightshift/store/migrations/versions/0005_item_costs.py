"""Each answer's cost through the normal API and what the prompt cache saved.

batch_items: ``cost_without_batch_usd`` and ``cache_savings_usd`` beside ``cost_usd``, set when
a step is applied. Items applied before this revision were priced with a table that billed batch
tokens at exactly half the normal price, so their normal-API cost is twice their cost (what the
API reported for them until now); what their cache saved was never recorded and stays NULL
(counted as nothing).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 02:15:32
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "cost_without_batch_usd", sa.Float(), nullable=True, comment="the same tokens through the normal API"
            )
        )
        batch_op.add_column(
            sa.Column(
                "cache_savings_usd",
                sa.Float(),
                nullable=True,
                comment="the cached tokens as plain input, minus what they cost",
            )
        )
    items = sa.table("batch_items", sa.column("cost_usd", sa.Float()), sa.column("cost_without_batch_usd", sa.Float()))
    op.execute(items.update().where(items.c.cost_usd.is_not(None)).values(cost_without_batch_usd=items.c.cost_usd * 2))


def downgrade() -> None:
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.drop_column("cache_savings_usd")
        batch_op.drop_column("cost_without_batch_usd")
