"""A background run's stream is stored, chunk by chunk, and the run carries its process's lease.

agent_run_chunks holds what the stream of a background run sent (``seq_id`` from 1), so that a
client reads it again from any point and from any server process; ``agent_runs.lease_until`` is
renewed by the process stepping a background run, so that a run whose process died is failed.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 11:24:34.634278
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import nightshift.store.tables

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_run_chunks",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("seq_id", sa.Integer(), nullable=False, comment="the chunk's number in its stream, from 1"),
        sa.Column("kind", sa.String(length=8), nullable=False, comment="data, error or done"),
        sa.Column(
            "data",
            sa.JSON(none_as_null=True).with_variant(
                postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
            ),
            nullable=True,
            comment="the chunk's JSON object; NULL for done",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_agent_run_chunks_run_id_agent_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "seq_id", name=op.f("pk_agent_run_chunks")),
    )
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_until", nightshift.store.tables.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.drop_column("lease_until")

    op.drop_table("agent_run_chunks")
