"""online_traces.span_count, online_traces.late_spans: spans that arrive after their trace was decided

A span stored for a trace whose rules were all decided re-opens the trace (``decided`` false again);
``late_spans`` counts such spans and ``span_count`` all of the trace's spans. Per-span rules score the
late spans once the trace is quiet again; per-trace rules keep their score, and the count says what it
missed (docs/online.md, "Late spans").

Revision ID: 0016
Revises: 0015
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("online_traces") as batch:
        batch.add_column(sa.Column("span_count", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("late_spans", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("online_traces") as batch:
        batch.drop_column("late_spans")
        batch.drop_column("span_count")
