"""batches.pruned_at, batches.pruned_scores: a batch whose scores retention removed says so

Retention (a suite's ``retention:`` block, ``assay prune``) removes the scores of batches whose every
item has a newer finished score. The batch row stays, with when it was pruned and how many scores
went, so its API answers "pruned" rather than an empty result.

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("pruned_scores", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("pruned_scores")
        batch.drop_column("pruned_at")
