"""On SQLite, new messages enter the full-text index in one statement per write, not by a trigger per row.

The trigger that copied each inserted message into ``messages_fts`` was most of the cost of
inserting a message; ``store.messages.insert_messages`` now indexes the rows it inserted with one
``INSERT ... SELECT`` in rowid order, which costs a fraction of it (docs/performance.md). Deletions
and updates of a message's text keep their triggers. PostgreSQL's expression index is unchanged.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 02:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS messages_fts_ai")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages WHEN new.search_text != '' BEGIN "
            "INSERT INTO messages_fts(rowid, search_text) VALUES (new.rowid, new.search_text); END"
        )
