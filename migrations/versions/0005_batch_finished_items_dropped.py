"""batches.finished_items dropped: a batch is done when none of its scores is active

Every landing that finished a score bumped this counter, and so queued on the batch row's lock until
its commit; completion is now found after the commit instead (no active score left).

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint(op.f("ck_batches_counts"), type_="check")
        batch.drop_column("finished_items")
        batch.create_check_constraint(op.f("ck_batches_counts"), "total_items >= 0")


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint(op.f("ck_batches_counts"), type_="check")
        batch.add_column(sa.Column("finished_items", sa.Integer(), nullable=False, server_default="0"))
    # Back to a counter: every score that is no longer active counts as finished.
    op.execute(
        "UPDATE batches SET finished_items = (SELECT count(*) FROM scores"
        " WHERE scores.batch_id = batches.id AND scores.status NOT IN ('pending', 'in_progress'))"
    )
    with op.batch_alter_table("batches") as batch:
        batch.create_check_constraint(
            op.f("ck_batches_counts"), "total_items >= 0 AND finished_items >= 0 AND finished_items <= total_items"
        )
