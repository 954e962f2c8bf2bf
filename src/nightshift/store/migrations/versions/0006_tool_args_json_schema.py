"""A tool's argument model: ``tools.args_json_schema``.

Set for tools whose arguments are pydantic models (Letta's ``args_json_schema``): the sandbox
rebuilds the models from it. NULL for every tool created before this revision, which is right:
none of them took model-typed arguments.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 03:03:52
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tools", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "args_json_schema",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("tools", schema=None) as batch_op:
        batch_op.drop_column("args_json_schema")
