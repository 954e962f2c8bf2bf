"""A run's record outlives its agents; a block made on its own outlives the agents it is attached to.

Batch items lose their foreign key to agents: deleting an agent no longer deletes its items, so a
run keeps its counts, tokens, costs and failures. The deleted agent's name is kept in
``deleted_agents`` for the views of its runs. Blocks get ``standalone``: one made with
``POST /v1/blocks`` is never deleted with an agent. Blocks written before this revision are taken
as made with an agent when one of their agents was created at the same instant (an agent and the
blocks it is created with share their creation time), and as standalone otherwise.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 05:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import nightshift.store.tables

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deleted_agents",
        sa.Column("id", sa.String(length=64), nullable=False, comment="the deleted agent's id"),
        sa.Column("organization_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("deleted_at", nightshift.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_deleted_agents_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deleted_agents")),
    )
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_batch_items_agent_id_agents"), type_="foreignkey")
    with op.batch_alter_table("blocks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "standalone",
                sa.Boolean(),
                server_default=sa.false(),
                nullable=False,
                comment="made on its own (POST /v1/blocks), not with an agent: deleting an agent never deletes it",
            )
        )
    op.execute(
        "UPDATE blocks SET standalone = NOT EXISTS ("
        " SELECT 1 FROM agent_blocks JOIN agents ON agents.id = agent_blocks.agent_id"
        " WHERE agent_blocks.block_id = blocks.id AND agents.created_at = blocks.created_at)"
    )


def downgrade() -> None:
    with op.batch_alter_table("blocks", schema=None) as batch_op:
        batch_op.drop_column("standalone")
    # Items of agents deleted meanwhile cannot point at an agent again: they go, as they did then.
    op.execute("DELETE FROM batch_items WHERE agent_id NOT IN (SELECT id FROM agents)")
    with op.batch_alter_table("batch_items", schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f("fk_batch_items_agent_id_agents"), "agents", ["agent_id"], ["id"], ondelete="CASCADE"
        )
    op.drop_table("deleted_agents")
