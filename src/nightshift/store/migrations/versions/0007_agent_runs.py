"""Agent runs: one row per message send to one agent, and the run and step on each message it wrote.

agent_runs holds Letta's runs of ``POST /v1/agents/{id}/messages`` and ``.../messages/async``;
messages get ``run_id`` and ``step_id`` (NULL for messages written before, and for batch runs).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 02:54:01.185592
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

import nightshift.store.clean
import nightshift.store.tables

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_runs",
        sa.Column("id", sa.String(length=64), nullable=False, comment="run-... (time-ordered)"),
        sa.Column("organization_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("background", sa.Boolean(), nullable=False),
        sa.Column(
            "request_config", sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"), nullable=False
        ),
        sa.Column(
            "metadata", sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"), nullable=False
        ),
        sa.Column("stop_reason", sa.String(length=32), nullable=True),
        sa.Column("error", nightshift.store.clean.CleanText(), nullable=True),
        sa.Column(
            "steps",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
            comment="one entry per model call: id, model, tokens",
        ),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("callback_sent_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("callback_status_code", sa.Integer(), nullable=True),
        sa.Column("callback_error", nightshift.store.clean.CleanText(), nullable=True),
        sa.Column("completed_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_agent_runs_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_agent_runs_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_runs")),
    )
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.create_index("ix_agent_runs_agent_id", ["agent_id"], unique=False)
        batch_op.create_index("ix_agent_runs_org_id", ["organization_id", "id"], unique=False)
        batch_op.create_index("ix_agent_runs_status", ["status"], unique=False)

    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "run_id", sa.String(length=64), nullable=True, comment="the agent run (run-...) that wrote it, if any"
            )
        )
        batch_op.add_column(sa.Column("step_id", sa.String(length=64), nullable=True, comment="the step of that run"))
        batch_op.create_index("ix_messages_run_id", ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_run_id")
        batch_op.drop_column("step_id")
        batch_op.drop_column("run_id")

    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_runs_status")
        batch_op.drop_index("ix_agent_runs_org_id")
        batch_op.drop_index("ix_agent_runs_agent_id")

    op.drop_table("agent_runs")
