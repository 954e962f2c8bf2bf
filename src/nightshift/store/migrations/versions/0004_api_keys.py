"""API keys: a prefix shown to tell keys apart, an admin flag, the last use and the revocation.

Keys made before this revision have no prefix (only their hash was kept: the CLI and the API
show the prefix as unknown), are not admin keys, have never been seen used and are not revoked.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 02:12:49
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import nightshift.store.tables

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "key_prefix",
                sa.String(length=16),
                nullable=True,
                comment="the key's first characters, shown to tell keys apart; null for old keys",
            )
        )
        batch_op.add_column(
            sa.Column(
                "is_admin",
                sa.Boolean(),
                # sa.false(): 0 on SQLite, false on PostgreSQL (which refuses an integer default here).
                server_default=sa.false(),
                nullable=False,
                comment="may manage its organization's keys",
            )
        )
        batch_op.add_column(
            sa.Column(
                "last_used_at",
                nightshift.store.tables.UTCDateTime(timezone=True),
                nullable=True,
                comment="written at most once a minute per key and process",
            )
        )
        batch_op.add_column(
            sa.Column(
                "revoked_at",
                nightshift.store.tables.UTCDateTime(timezone=True),
                nullable=True,
                comment="set once: from then on the key is refused",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("last_used_at")
        batch_op.drop_column("is_admin")
        batch_op.drop_column("key_prefix")
