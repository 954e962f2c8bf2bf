"""Sleep-time groups, and the kind of a batch run.

groups (with group_agents, its sleep-time agents) pairs a main agent, whose new
agents.managed_group_id names the group, with its sleep-time agents; batch_runs.kind tells the
runs of sleep-time agents the poller gathers from the users' (every run so far: main).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03 06:05:59.885182
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import nightshift.store.clean
import nightshift.store.tables

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("id", sa.String(length=64), nullable=False, comment="group-..."),
        sa.Column("organization_id", sa.String(length=64), nullable=False),
        sa.Column("manager_type", sa.String(length=32), nullable=False),
        sa.Column("description", nightshift.store.clean.CleanText(), nullable=False),
        sa.Column(
            "sleeptime_agent_frequency",
            sa.Integer(),
            nullable=True,
            comment="every how many turns of the main agent; null: every turn",
        ),
        sa.Column("turns_counter", sa.Integer(), nullable=False, comment="the main agent's turns counted so far"),
        sa.Column(
            "last_processed_message_id",
            sa.String(length=64),
            nullable=True,
            comment="the main agent's last message its sleep-time agents read",
        ),
        sa.Column(
            "due_since",
            nightshift.store.tables.UTCDateTime(timezone=True),
            nullable=True,
            comment="set when its sleep-time agents are due (in the main turn's transaction), cleared when gathered",
        ),
        sa.Column(
            "shared_block_ids",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("hidden", sa.Boolean(), nullable=True),
        sa.Column("created_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_groups_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_groups")),
    )
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.create_index(
            "ix_groups_due_since",
            ["due_since"],
            unique=False,
            sqlite_where=sa.text("due_since IS NOT NULL"),
            postgresql_where=sa.text("due_since IS NOT NULL"),
        )
        batch_op.create_index("ix_groups_org_id", ["organization_id", "id"], unique=False)

    op.create_table(
        "group_agents",
        sa.Column("group_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_group_agents_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["group_id"], ["groups.id"], name=op.f("fk_group_agents_group_id_groups"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("group_id", "agent_id", name=op.f("pk_group_agents")),
    )
    with op.batch_alter_table("group_agents", schema=None) as batch_op:
        batch_op.create_index("ix_group_agents_agent_id", ["agent_id"], unique=False)

    # Plain ALTER TABLE ADD COLUMN on both databases: in batch mode SQLite may copy the table, and
    # dropping the old copy of batch_runs would take its provider batches and items with it.
    op.add_column(
        "agents",
        sa.Column(
            "managed_group_id",
            sa.String(length=64),
            nullable=True,
            comment="the group it manages (its sleep-time agent's); no foreign key: deleting a group clears it",
        ),
    )
    op.create_index(
        "ix_agents_managed_group_id",
        "agents",
        ["managed_group_id"],
        unique=False,
        sqlite_where=sa.text("managed_group_id IS NOT NULL"),
        postgresql_where=sa.text("managed_group_id IS NOT NULL"),
    )
    op.add_column(
        "batch_runs",
        sa.Column(
            "kind",
            sa.String(length=16),
            server_default=sa.text("'main'"),
            nullable=False,
            comment="main: the user's agents; sleeptime: sleep-time agents gathered by the poller",
        ),
    )


def downgrade() -> None:
    # DROP COLUMN in place (SQLite 3.35 and later, PostgreSQL), for the reason upgrade adds them so.
    op.execute("ALTER TABLE batch_runs DROP COLUMN kind")
    op.drop_index("ix_agents_managed_group_id", table_name="agents")
    op.execute("ALTER TABLE agents DROP COLUMN managed_group_id")

    with op.batch_alter_table("group_agents", schema=None) as batch_op:
        batch_op.drop_index("ix_group_agents_agent_id")

    op.drop_table("group_agents")
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.drop_index("ix_groups_org_id")
        batch_op.drop_index(
            "ix_groups_due_since",
            sqlite_where=sa.text("due_since IS NOT NULL"),
            postgresql_where=sa.text("due_since IS NOT NULL"),
        )

    op.drop_table("groups")
