"""broker_epochs: the brokers the store has seen, to tell a new broker from one restarted empty

Before, the reconciler knew only that its marker key was gone from Redis, which is as true of a
broker that has just started (its messages queued by the planner) as of one that lost them, and it
re-sent every pending component on every fresh start.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "broker_epochs",
        sa.Column("identity", sa.String(64), primary_key=True),
        sa.Column("holds_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("broker_epochs")
