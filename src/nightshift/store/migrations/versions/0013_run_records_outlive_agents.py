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

import re
from collections.abc import Callable, Sequence

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
    if op.get_bind().dialect.name == "sqlite":
        _drop_agent_key_sqlite()
    else:
        op.drop_constraint(op.f("fk_batch_items_agent_id_agents"), "batch_items", type_="foreignkey")
    # Not in batch mode: on SQLite that copies the table into a new one and drops the old, and
    # dropping it deletes its rows first, with what their foreign keys cascade (every agent's
    # links to its blocks). ADD COLUMN with a default needs no copy.
    op.add_column(
        "blocks",
        sa.Column(
            "standalone",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
            comment="made on its own (POST /v1/blocks), not with an agent: deleting an agent never deletes it",
        ),
    )
    op.execute(
        "UPDATE blocks SET standalone = NOT EXISTS ("
        " SELECT 1 FROM agent_blocks JOIN agents ON agents.id = agent_blocks.agent_id"
        " WHERE agent_blocks.block_id = blocks.id AND agents.created_at = blocks.created_at)"
    )


# The clause of batch_items' CREATE TABLE that makes agent_id a foreign key to agents.
_AGENT_KEY = re.compile(
    r",\s*(CONSTRAINT\s+\"?fk_batch_items_agent_id_agents\"?\s+)?FOREIGN KEY\s*\(\s*\"?agent_id\"?\s*\)"
    r"\s*REFERENCES\s+\"?agents\"?\s*\(\s*\"?id\"?\s*\)(\s+ON DELETE CASCADE)?",
    re.IGNORECASE,
)


def _drop_agent_key_sqlite() -> None:
    """Drop the foreign key of batch_items.agent_id on SQLite, in place.

    SQLite cannot drop a constraint, and the usual way round (copy the table, drop the old one)
    would take every message's link to its item with it (dropping a table deletes its rows first,
    and messages.batch_item_id is SET NULL on delete); foreign keys cannot be switched off inside
    the migration's transaction. A constraint that changes nothing on disk may be dropped from the
    table's definition instead, as SQLite's documentation describes for "other kinds of table
    schema changes": its CREATE TABLE text is rewritten and the schema version bumped.
    """

    def without_key(created: str) -> str:
        without, found = _AGENT_KEY.subn("", created)
        if found != 1:
            raise RuntimeError(f"batch_items: expected one foreign key to agents in its definition, found {found}")
        return without

    _rewrite_sqlite_definition(without_key)
    keys = op.get_bind().execute(sa.text("PRAGMA foreign_key_list(batch_items)")).all()
    if any(key.table == "agents" for key in keys):
        raise RuntimeError("batch_items: its foreign key to agents is still there")


_KEY_CLAUSE = "CONSTRAINT fk_batch_items_agent_id_agents FOREIGN KEY(agent_id) REFERENCES agents (id) ON DELETE CASCADE"


def _rewrite_sqlite_definition(rewrite: Callable[[str], str]) -> None:
    """Replace batch_items' CREATE TABLE text on SQLite with ``rewrite`` of it (a change of
    constraints only: nothing on disk changes), and make every connection read it again."""
    bind = op.get_bind()
    definition = bind.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'batch_items'"))
    created = rewrite(str(definition.scalar_one()))
    version = int(bind.execute(sa.text("PRAGMA schema_version")).scalar_one())
    bind.execute(sa.text("PRAGMA writable_schema = ON"))
    bind.execute(
        sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = 'batch_items'"), {"sql": created}
    )
    bind.execute(sa.text(f"PRAGMA schema_version = {version + 1}"))
    bind.execute(sa.text("PRAGMA writable_schema = OFF"))


def downgrade() -> None:
    op.drop_column("blocks", "standalone")  # SQLite 3.35 and later drop a column in place
    # Items of agents deleted meanwhile cannot point at an agent again: they go, as they did then.
    op.execute("DELETE FROM batch_items WHERE agent_id NOT IN (SELECT id FROM agents)")
    if op.get_bind().dialect.name == "sqlite":
        _rewrite_sqlite_definition(lambda created: created[: created.rindex(")")] + f", {_KEY_CLAUSE}\n)")
    else:
        op.create_foreign_key(
            op.f("fk_batch_items_agent_id_agents"), "batch_items", "agents", ["agent_id"], ["id"], ondelete="CASCADE"
        )
    op.drop_table("deleted_agents")
