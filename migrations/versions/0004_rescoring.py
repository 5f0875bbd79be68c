"""re-scoring: batch budgets, the judge's batch lane (provider batches)

Revision ID: 0004
Revises: 0003
"""
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_OLD_STATUSES = "status IN ('planning', 'running', 'completed', 'cancelled', 'failed')"
_NEW_STATUSES = "status IN ('planning', 'running', 'completed', 'cancelled', 'failed', 'budget_exhausted')"


@contextmanager
def _views_set_aside() -> Iterator[None]:
    """SQLite alters a table by copying it, which fails while a view (session_scores) reads it:
    drop the views for the copy and recreate them from their own stored SQL."""
    bind = op.get_bind()
    views = bind.execute(sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view'")).all() if bind.dialect.name == "sqlite" else []
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    yield
    for _, sql in views:
        op.execute(sql)


def upgrade() -> None:
    op.create_table(
        "provider_batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("provider_id", sa.String(length=100), nullable=True),
        sa.Column("batch_id", sa.Uuid(), nullable=False),
        sa.Column("component", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.Column("request_bytes", sa.BigInteger(), nullable=False),
        sa.Column("request_counts", sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql"), nullable=True),
        sa.Column("polls", sa.Integer(), nullable=False),
        sa.Column("next_poll_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('creating', 'in_progress', 'ended', 'processed', 'failed')", name=op.f("ck_provider_batches_status")
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name=op.f("fk_provider_batches_batch_id_batches"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider_batches")),
        sa.UniqueConstraint("provider_id", name=op.f("uq_provider_batches_provider_id")),
    )
    op.create_index(op.f("ix_provider_batches_batch_id"), "provider_batches", ["batch_id"], unique=False)
    op.create_index(op.f("ix_provider_batches_next_poll_at"), "provider_batches", ["next_poll_at"], unique=False)
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("budget_usd", sa.Float(), nullable=True))
        batch.add_column(sa.Column("spent_usd", sa.Float(), server_default=sa.text("0"), nullable=False))
        batch.add_column(sa.Column("judge_lane", sa.String(length=20), server_default=sa.text("'realtime'"), nullable=False))
        batch.drop_constraint(op.f("ck_batches_status"), type_="check")
        batch.create_check_constraint(op.f("ck_batches_status"), _NEW_STATUSES)
        batch.create_check_constraint(op.f("ck_batches_budget"), "budget_usd IS NULL OR budget_usd > 0")
        batch.create_check_constraint(op.f("ck_batches_judge_lane"), "judge_lane IN ('realtime', 'batch')")
    with _views_set_aside(), op.batch_alter_table("score_components") as batch:
        batch.add_column(sa.Column("provider_batch_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_score_components_provider_batch_id_provider_batches"),
            "provider_batches",
            ["provider_batch_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_index(
        op.f("ix_score_components_provider_batch_id"), "score_components", ["provider_batch_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_score_components_provider_batch_id"), table_name="score_components")
    with _views_set_aside(), op.batch_alter_table("score_components") as batch:
        batch.drop_constraint(op.f("fk_score_components_provider_batch_id_provider_batches"), type_="foreignkey")
        batch.drop_column("provider_batch_id")
    op.execute("UPDATE batches SET status = 'cancelled' WHERE status = 'budget_exhausted'")
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint(op.f("ck_batches_judge_lane"), type_="check")
        batch.drop_constraint(op.f("ck_batches_budget"), type_="check")
        batch.drop_constraint(op.f("ck_batches_status"), type_="check")
        batch.create_check_constraint(op.f("ck_batches_status"), _OLD_STATUSES)
        batch.drop_column("judge_lane")
        batch.drop_column("spent_usd")
        batch.drop_column("budget_usd")
    op.drop_index(op.f("ix_provider_batches_next_poll_at"), table_name="provider_batches")
    op.drop_index(op.f("ix_provider_batches_batch_id"), table_name="provider_batches")
    op.drop_table("provider_batches")
