"""spans, online_traces, online_decisions, online_scores: online scoring from OpenTelemetry traces

``spans`` holds what ``POST /v1/traces`` received. On PostgreSQL it is partitioned by day of receipt
(``PARTITION BY RANGE (received_at)``): the partitions themselves are created by the application
(ahead of time by beat, on demand at ingest) and dropped whole by retention, so this migration creates
none. SQLite (the embedded mode) gets a plain table.

Revision ID: 0015
Revises: 0014
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spans",
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("parent_span_id", sa.String(16), nullable=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("service_name", sa.String(255), nullable=True),
        sa.Column("kind", sa.Integer(), nullable=False),
        sa.Column("start_unix_nano", sa.BigInteger(), nullable=False),
        sa.Column("end_unix_nano", sa.BigInteger(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("resource", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("received_at", "id", name="pk_spans"),
        postgresql_partition_by="RANGE (received_at)",
    )
    op.create_index("ix_spans_trace", "spans", ["trace_id"])
    op.create_table(
        "online_traces",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("first_received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("root_ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", name="pk_online_traces"),
    )
    op.create_index("ix_online_traces_open", "online_traces", ["decided", "last_received_at"])
    op.create_table(
        "online_decisions",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("suite_name", sa.String(100), nullable=False),
        sa.Column("rule", sa.String(100), nullable=False),
        sa.Column("decision", sa.String(20), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "suite_name", "rule", name="pk_online_decisions"),
    )
    op.create_index("ix_online_decisions_rule_day", "online_decisions", ["suite_name", "rule", "day", "decision"])
    op.create_table(
        "online_scores",
        sa.Column("score_id", sa.Uuid(), nullable=False),
        sa.Column("item_id", sa.Uuid(), nullable=False),
        sa.Column("suite_name", sa.String(100), nullable=False),
        sa.Column("rule", sa.String(100), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=True),
        sa.Column("slice", sa.String(255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["score_id"], ["scores.id"], name="fk_online_scores_score_id_scores", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], name="fk_online_scores_item_id_items", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("score_id", name="pk_online_scores"),
    )
    op.create_index("ix_online_scores_item_id", "online_scores", ["item_id"])
    op.create_index("ix_online_scores_trace_id", "online_scores", ["trace_id"])
    op.create_index("ix_online_scores_suite_created", "online_scores", ["suite_name", "created_at"])


def downgrade() -> None:
    op.drop_table("online_scores")
    op.drop_table("online_decisions")
    op.drop_table("online_traces")
    # Dropping a partitioned table drops its partitions.
    op.drop_table("spans")
