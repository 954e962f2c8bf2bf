"""Batch items: counted by state from an index, usage NULL (not JSON null) until a result is stored.

A look at a run counts the items of its open provider batches (``batch_summaries.summarize``):
grouping them by state read every item's row, and summing
their usage parsed every item's JSON, those waiting for a result included, because an absent
usage was stored as JSON ``null``, which ``usage IS NOT NULL`` matches. The counts now come from
an index by (provider batch, step status, outcome), which replaces the one by provider batch;
an absent usage is SQL NULL, and a partial index finds the items that have one.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_USED = sa.text("usage IS NOT NULL")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE batch_items SET usage = NULL WHERE jsonb_typeof(usage) = 'null'")
    else:
        op.execute("UPDATE batch_items SET usage = NULL WHERE usage = 'null'")
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_batch_items_provider_batch_id"))
        batch_op.create_index(
            "ix_batch_items_provider_batch_id_state", ["provider_batch_id", "step_status", "outcome"], unique=False
        )
        batch_op.create_index(
            "ix_batch_items_provider_batch_id_used",
            ["provider_batch_id"],
            unique=False,
            sqlite_where=_USED,
            postgresql_where=_USED,
        )


def downgrade() -> None:
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.drop_index("ix_batch_items_provider_batch_id_used", sqlite_where=_USED, postgresql_where=_USED)
        batch_op.drop_index("ix_batch_items_provider_batch_id_state")
        batch_op.create_index(batch_op.f("ix_batch_items_provider_batch_id"), ["provider_batch_id"], unique=False)
    # (An absent usage stays SQL NULL: the code before this revision reads it as it reads JSON null.)
