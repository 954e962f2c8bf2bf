"""Agents: context_tokens, the size of the request an agent's window makes, kept up to date step by step.

NULL for agents created before: their first step counts their window once. Tool results join
what full-text search indexes (conversation_search finds what tools returned): the ones stored
before are indexed here.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 04:49:27.253267
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_BACKFILL_ROWS = 1000


def _returned(text: str) -> str:
    """What a tool returned, out of a tool message's JSON (as ``domain.messages.inner_text``)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if not isinstance(body, dict) or "message" not in body:
        return text
    return body["message"] if isinstance(body["message"], str) else json.dumps(body["message"])


def upgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "context_tokens",
                sa.Integer(),
                nullable=True,
                comment="the size of the request its window makes, in tokens; null until counted",
            )
        )
    messages = sa.table(
        "messages",
        sa.column("id", sa.String),
        sa.column("role", sa.String),
        sa.column("text", sa.Text),
        sa.column("search_text", sa.Text),
    )
    conn = op.get_bind()
    last = ""
    while True:
        rows = conn.execute(
            sa.select(messages.c.id, messages.c.text)
            .where(messages.c.role == "tool", messages.c.id > last)
            .order_by(messages.c.id)
            .limit(_BACKFILL_ROWS)
        ).all()
        if not rows:
            break
        conn.execute(
            messages.update().where(messages.c.id == sa.bindparam("m_id")).values(search_text=sa.bindparam("returned")),
            [{"m_id": row.id, "returned": _returned(row.text)} for row in rows],
        )
        last = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("context_tokens")
