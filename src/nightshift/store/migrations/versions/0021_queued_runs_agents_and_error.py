"""A queued run's agents and error: what a run says before its first step.

batch_runs.queued_agents is how many agents its requests hold while it waits for its first step,
written with the run and lowered when one of its agents is cancelled then: a queued run's progress
counts them as running, and a run cancelled while queued as cancelled (its requests are deleted
then). The runs queued at the upgrade take the count of their requests. batch_runs.error says why
a run failed before its first step (every agent deleted, or the step could not be written).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04 15:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import nightshift.store.clean

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "batch_runs",
        sa.Column(
            "queued_agents",
            sa.Integer(),
            nullable=False,
            server_default=sa.text("0"),
            comment="agents in the run's requests while it waits for its first step (what its progress counts then)",
        ),
    )
    op.add_column(
        "batch_runs",
        sa.Column(
            "error",
            nightshift.store.clean.CleanText(),
            nullable=True,
            comment="why the run failed before its first step; null: it did not",
        ),
    )
    op.execute(
        "UPDATE batch_runs SET queued_agents = "
        "(SELECT count(*) FROM batch_run_requests WHERE batch_run_requests.batch_run_id = batch_runs.id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("batch_runs") as batch_op:
        batch_op.drop_column("error")
        batch_op.drop_column("queued_agents")
