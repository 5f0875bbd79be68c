"""Per-component judge output and carried-over components

A suite may now have several judge components: the raw answer a judge component gave when it was
unusable is kept on that component (``score_components.raw_output``; the score-level
``raw_judge_output`` stays, holding the last one, for existing readers). Whether a repair call was
needed is in the component's details (``repaired``).

A re-score carries a component whose own specification and item are unchanged over from the
item's previous score instead of paying for it again: ``carried_over_from`` names the score whose
run computed the result (no foreign key: that score is history and may be deleted with its batch).

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


# Plain ADD / DROP COLUMN, not a batch (copy-and-move) alter: on SQLite the session views name
# score_components, and a table rebuild would break them.
def upgrade() -> None:
    op.add_column("score_components", sa.Column("raw_output", sa.Text(), nullable=True))
    op.add_column("score_components", sa.Column("carried_over_from", sa.Uuid(), nullable=True))


def downgrade() -> None:
    op.drop_column("score_components", "carried_over_from")
    op.drop_column("score_components", "raw_output")
