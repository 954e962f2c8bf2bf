"""Provider batches: summary, what their items add up to, stored once the items are final.

A look at a run reads its closed batches' summaries instead of counting and summing every item
(``store/batch_summaries.py``). The batches already applied or cancelled get theirs here, in the
shape of ``BatchSummary.to_json`` version 1, counted as the views counted them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 10:08:18.189228
"""

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_FINAL = ("applied", "cancelling", "cancelled")
_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
)
_BACKFILL_BATCHES = 100


def upgrade() -> None:
    with op.batch_alter_table("provider_batches", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "summary",
                _JSON,
                nullable=True,
                comment="versioned JSON: its items counted and summed, once they are final (applied or cancelled)",
            )
        )
    batches = sa.table(
        "provider_batches", sa.column("id", sa.String), sa.column("status", sa.String), sa.column("summary", _JSON)
    )
    items = sa.table(
        "batch_items",
        sa.column("provider_batch_id", sa.String),
        sa.column("step_status", sa.String),
        sa.column("outcome", sa.String),
        sa.column("usage", _JSON),
        sa.column("cost_usd", sa.Float),
        sa.column("cost_without_batch_usd", sa.Float),
        sa.column("cache_savings_usd", sa.Float),
    )
    conn = op.get_bind()
    last = ""
    while True:
        ids = list(
            conn.scalars(
                sa.select(batches.c.id)
                .where(batches.c.status.in_(_FINAL), batches.c.id > last)
                .order_by(batches.c.id)
                .limit(_BACKFILL_BATCHES)
            )
        )
        if not ids:
            break
        conn.execute(
            batches.update().where(batches.c.id == sa.bindparam("b_id")).values(summary=sa.bindparam("summary")),
            [{"b_id": batch_id, "summary": summary} for batch_id, summary in _summaries(conn, items, ids).items()],
        )
        last = ids[-1]


def _summaries(conn: sa.Connection, items: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each batch's summary from its items (``store/batch_summaries.summarize`` as of this revision)."""
    counts: defaultdict[str, list[list[Any]]] = defaultdict(list)
    by_state = conn.execute(
        sa.select(items.c.provider_batch_id, items.c.step_status, items.c.outcome, sa.func.count())
        .where(items.c.provider_batch_id.in_(ids))
        .group_by(items.c.provider_batch_id, items.c.step_status, items.c.outcome)
    )
    for batch_id, step_status, outcome, count in by_state:
        counts[batch_id].append([step_status, outcome or None, int(count)])
    sums: dict[str, tuple[dict[str, int], list[float]]] = {}
    for batch_id, *values in conn.execute(
        sa.select(
            items.c.provider_batch_id,
            *(sa.func.sum(items.c.usage[key].as_integer()) for key in _USAGE_KEYS),
            sa.func.sum(items.c.cost_usd),
            sa.func.sum(items.c.cost_without_batch_usd),
            sa.func.sum(items.c.cache_savings_usd),
        )
        .where(items.c.provider_batch_id.in_(ids), items.c.usage.is_not(None))
        .group_by(items.c.provider_batch_id)
    ):
        tokens, costs = values[: len(_USAGE_KEYS)], values[len(_USAGE_KEYS) :]
        usage = {key: int(total) for key, total in zip(_USAGE_KEYS, tokens, strict=True) if total is not None}
        sums[batch_id] = (usage, [float(cost or 0.0) for cost in costs])
    return {
        batch_id: {
            "schema_version": 1,
            "items": counts.get(batch_id, []),
            "usage": sums[batch_id][0] if batch_id in sums else None,
            "cost": sums[batch_id][1] if batch_id in sums else [0.0, 0.0, 0.0],
        }
        for batch_id in ids
    }


def downgrade() -> None:
    with op.batch_alter_table("provider_batches", schema=None) as batch_op:
        batch_op.drop_column("summary")
