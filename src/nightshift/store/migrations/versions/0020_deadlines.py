"""Deadlines: a run's finish-by time, and the take-over of a provider batch's stragglers.

batch_runs.deadline_at is the time a run is to be done by (null: none); each provider batch of a
step carries it (provider_batches.deadline_at), with when only a tail of its requests was left
(tail_at), when its take-over started (takeover_at) and how many of its requests
went through the normal API (taken_over). batch_items.takeover_usd is what such a request cost
above the batch price. provider_batches.model is the one model of a batch's requests (null when
they are of several: an Anthropic batch may mix them), by which turnarounds are kept per model.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 09:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import nightshift.store.tables

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str, comment: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, nightshift.store.tables.UTCDateTime(timezone=True), nullable=True, comment=comment)


def upgrade() -> None:
    op.add_column("batch_runs", _time("deadline_at", "when the run is to be done by; null: no deadline"))
    op.add_column("provider_batches", _time("deadline_at", "its run's deadline, copied when the step was written"))
    op.add_column("provider_batches", _time("tail_at", "when only a tail of its requests was left, seen or expected"))
    op.add_column("provider_batches", _time("takeover_at", "when its open requests were taken over for the deadline"))
    op.add_column(
        "provider_batches",
        sa.Column(
            "taken_over",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="its requests sent through the normal API instead",
        ),
    )
    op.add_column(
        "provider_batches",
        sa.Column("model", sa.String(length=255), nullable=True, comment="its requests' one model; null: several"),
    )
    op.add_column(
        "batch_items",
        sa.Column("takeover_usd", sa.Float(), nullable=True, comment="taken over: its cost above the batch price"),
    )


def downgrade() -> None:
    with op.batch_alter_table("batch_items") as batch_op:
        batch_op.drop_column("takeover_usd")
    with op.batch_alter_table("provider_batches") as batch_op:
        for name in ("model", "taken_over", "takeover_at", "tail_at", "deadline_at"):
            batch_op.drop_column(name)
    with op.batch_alter_table("batch_runs") as batch_op:
        batch_op.drop_column("deadline_at")
