"""pairwise_runs: batches compared item by item under a suite's pairwise rubric

A pairwise run's pairs are the items (kind ``pairwise``) of one batch, judged in both orders under
the pairwise criteria's own hash (``criteria_hash``, not the suite's). ``systems`` names the compared
batches, ``design`` how the pairs were planned, ``report`` what the run found once its batch finished
(wins / ties / losses, win rates, Bradley-Terry strengths with their intervals).

Revision ID: 0014
Revises: 0013
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "pairwise_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("criteria_hash", sa.String(length=64), nullable=False),
        sa.Column("batch_id", sa.Uuid(), nullable=True),
        sa.Column("systems", _JSON, nullable=False),
        sa.Column("design", _JSON, nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("report", _JSON, nullable=True),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'failed', 'cancelled')", name=op.f("ck_pairwise_runs_status")
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name=op.f("fk_pairwise_runs_batch_id_batches"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["criteria_hash"],
            ["scoring_criteria_definitions.criteria_hash"],
            name=op.f("fk_pairwise_runs_criteria_hash_scoring_criteria_definitions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pairwise_runs")),
    )
    op.create_index(op.f("ix_pairwise_runs_batch_id"), "pairwise_runs", ["batch_id"], unique=False)
    op.create_index("ix_pairwise_runs_suite_created", "pairwise_runs", ["suite_name", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_pairwise_runs_suite_created", table_name="pairwise_runs")
    op.drop_index(op.f("ix_pairwise_runs_batch_id"), table_name="pairwise_runs")
    op.drop_table("pairwise_runs")
