"""Submitting a provider batch once, to a known endpoint; idempotent run creation.

provider_batches: the endpoint a batch goes to, the intent to submit (recorded before the call)
and the attempts, the consecutive failures of its current stage, the duplicates found and
cancelled, and a unique provider id. batch_runs: the Idempotency-Key a run was created with.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

import nightshift.store.tables

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("provider_batches", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("endpoint", sa.String(length=255), nullable=True, comment="the provider's base URL it goes to")
        )
        batch_op.add_column(
            sa.Column(
                "submit_started_at",
                nightshift.store.tables.UTCDateTime(timezone=True),
                nullable=True,
                comment="set before each call that submits it: the provider may have it from then on",
            )
        )
        batch_op.add_column(sa.Column("submit_attempts", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(
            sa.Column(
                "failures",
                sa.Integer(),
                server_default="0",
                nullable=False,
                comment="consecutive failures of its current stage",
            )
        )
        batch_op.add_column(
            sa.Column(
                "duplicates",
                JSON,
                server_default=sa.text("'[]'"),
                nullable=False,
                comment="provider ids of the same batch submitted twice, cancelled",
            )
        )
        batch_op.create_unique_constraint(
            "uq_provider_batches_provider_provider_batch_id", ["provider", "provider_batch_id"]
        )
    with op.batch_alter_table("batch_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idempotency_key", sa.String(length=255), nullable=True))
        batch_op.add_column(
            sa.Column("request_hash", sa.String(length=64), nullable=True, comment="sha256 of the creating request")
        )
        batch_op.create_unique_constraint(
            "uq_batch_runs_organization_id_idempotency_key", ["organization_id", "idempotency_key"]
        )


def downgrade() -> None:
    with op.batch_alter_table("batch_runs", schema=None) as batch_op:
        batch_op.drop_constraint("uq_batch_runs_organization_id_idempotency_key", type_="unique")
        batch_op.drop_column("request_hash")
        batch_op.drop_column("idempotency_key")
    with op.batch_alter_table("provider_batches", schema=None) as batch_op:
        batch_op.drop_constraint("uq_provider_batches_provider_provider_batch_id", type_="unique")
        batch_op.drop_column("duplicates")
        batch_op.drop_column("failures")
        batch_op.drop_column("submit_attempts")
        batch_op.drop_column("submit_started_at")
        batch_op.drop_column("endpoint")
