"""How far to trust a score: calibration runs and noise estimates, human labels, a review queue

- ``calibration_runs``: a sample of a suite's stored items judged K times under its current
  criteria, carried by a batch (budget, estimate, planning). Its scores name the run
  (``scores.calibration_run_id``) and their repeat (``scores.calibration_repeat``); they sit outside
  the one-active-score rule (``uq_scores_active_item_criteria`` gains ``calibration_run_id IS NULL``)
  and a run holds one score per (item, repeat) (``uq_scores_calibration_item_repeat``).
- ``noise_estimates``: per run and judge component (``__total__`` for the total) the pooled
  within-item standard deviation, and for the total the share of items whose pass/fail flipped.
- ``labels``: people's verdicts on items (uploaded, or recorded as reviews), one per annotator.
- ``review_queue`` and ``reviews``: finalized scores picked by a suite's review rules, and the
  verdicts people recorded on them.

Revision ID: 0009
Revises: 0008
"""
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")
_ACTIVE = "status IN ('pending', 'in_progress')"
_ACTIVE_MACHINE = f"{_ACTIVE} AND calibration_run_id IS NULL"
_CALIBRATION = "calibration_run_id IS NOT NULL"


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
        "calibration_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("criteria_hash", sa.String(length=64), nullable=False),
        sa.Column("batch_id", sa.Uuid(), nullable=True),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'failed', 'cancelled')", name=op.f("ck_calibration_runs_status")
        ),
        sa.CheckConstraint("sample >= 1", name=op.f("ck_calibration_runs_sample")),
        sa.CheckConstraint("repeats >= 2", name=op.f("ck_calibration_runs_repeats")),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name=op.f("fk_calibration_runs_batch_id_batches"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["criteria_hash"],
            ["scoring_criteria_definitions.criteria_hash"],
            name=op.f("fk_calibration_runs_criteria_hash_scoring_criteria_definitions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibration_runs")),
    )
    op.create_index(op.f("ix_calibration_runs_batch_id"), "calibration_runs", ["batch_id"], unique=False)
    op.create_index("ix_calibration_runs_suite_created", "calibration_runs", ["suite_name", "created_at"], unique=False)

    op.create_table(
        "noise_estimates",
        sa.Column("calibration_run_id", sa.Uuid(), nullable=False),
        sa.Column("component", sa.String(length=64), nullable=False),
        sa.Column("criteria_hash", sa.String(length=64), nullable=False),
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("sigma_w", sa.Float(), nullable=True),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("flip_share", sa.Float(), nullable=True),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("sigma_w IS NULL OR sigma_w >= 0", name=op.f("ck_noise_estimates_sigma_w")),
        sa.CheckConstraint(
            "flip_share IS NULL OR (flip_share >= 0 AND flip_share <= 1)", name=op.f("ck_noise_estimates_flip_share")
        ),
        sa.CheckConstraint("items >= 0 AND repeats >= 0", name=op.f("ck_noise_estimates_counts")),
        sa.ForeignKeyConstraint(
            ["calibration_run_id"],
            ["calibration_runs.id"],
            name=op.f("fk_noise_estimates_calibration_run_id_calibration_runs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["criteria_hash"],
            ["scoring_criteria_definitions.criteria_hash"],
            name=op.f("fk_noise_estimates_criteria_hash_scoring_criteria_definitions"),
        ),
        sa.PrimaryKeyConstraint("calibration_run_id", "component", name=op.f("pk_noise_estimates")),
    )
    op.create_index("ix_noise_estimates_hash_computed", "noise_estimates", ["criteria_hash", "computed_at"], unique=False)

    # Scores: drop the one-active rule first (a SQLite copy would carry it over), add the columns,
    # then recreate it with calibration scores left out.
    op.drop_index("uq_scores_active_item_criteria", table_name="scores", postgresql_where=sa.text(_ACTIVE), sqlite_where=sa.text(_ACTIVE))
    with _views_set_aside(), op.batch_alter_table("scores") as batch:
        batch.add_column(sa.Column("calibration_run_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("calibration_repeat", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_scores_calibration_run_id_calibration_runs"),
            "calibration_runs",
            ["calibration_run_id"],
            ["id"],
            ondelete="CASCADE",
        )
    op.create_index(op.f("ix_scores_calibration_run_id"), "scores", ["calibration_run_id"], unique=False)
    op.create_index(
        "uq_scores_active_item_criteria",
        "scores",
        ["item_id", "criteria_hash"],
        unique=True,
        postgresql_where=sa.text(_ACTIVE_MACHINE),
        sqlite_where=sa.text(_ACTIVE_MACHINE),
    )
    op.create_index(
        "uq_scores_calibration_item_repeat",
        "scores",
        ["calibration_run_id", "item_id", "calibration_repeat"],
        unique=True,
        postgresql_where=sa.text(_CALIBRATION),
        sqlite_where=sa.text(_CALIBRATION),
    )

    op.create_table(
        "labels",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("item_id", sa.Uuid(), nullable=False),
        sa.Column("annotator", sa.String(length=255), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("passed IS NOT NULL OR score IS NOT NULL", name=op.f("ck_labels_verdict")),
        sa.CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name=op.f("ck_labels_score_range")),
        sa.CheckConstraint("source IN ('upload', 'review')", name=op.f("ck_labels_source")),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], name=op.f("fk_labels_item_id_items"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_labels")),
        sa.UniqueConstraint("suite_name", "item_id", "annotator", name="uq_labels_suite_item_annotator"),
    )
    op.create_index(op.f("ix_labels_item_id"), "labels", ["item_id"], unique=False)

    op.create_table(
        "review_queue",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("score_id", sa.Uuid(), nullable=False),
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("item_id", sa.Uuid(), nullable=False),
        sa.Column("criteria_hash", sa.String(length=64), nullable=False),
        sa.Column("reasons", _JSON, nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('open', 'reviewed', 'closed')", name=op.f("ck_review_queue_status")),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], name=op.f("fk_review_queue_item_id_items"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["score_id"], ["scores.id"], name=op.f("fk_review_queue_score_id_scores"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_queue")),
        sa.UniqueConstraint("score_id", name=op.f("uq_review_queue_score_id")),
    )
    op.create_index(op.f("ix_review_queue_item_id"), "review_queue", ["item_id"], unique=False)
    op.create_index("ix_review_queue_suite_status", "review_queue", ["suite_name", "status"], unique=False)

    op.create_table(
        "reviews",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("queue_entry_id", sa.Uuid(), nullable=True),
        sa.Column("score_id", sa.Uuid(), nullable=False),
        sa.Column("item_id", sa.Uuid(), nullable=False),
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("reviewer", sa.String(length=255), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name=op.f("ck_reviews_score_range")),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], name=op.f("fk_reviews_item_id_items"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["queue_entry_id"], ["review_queue.id"], name=op.f("fk_reviews_queue_entry_id_review_queue"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["score_id"], ["scores.id"], name=op.f("fk_reviews_score_id_scores"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reviews")),
    )
    op.create_index(op.f("ix_reviews_item_id"), "reviews", ["item_id"], unique=False)
    op.create_index(op.f("ix_reviews_queue_entry_id"), "reviews", ["queue_entry_id"], unique=False)
    op.create_index(op.f("ix_reviews_score_id"), "reviews", ["score_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_reviews_score_id"), table_name="reviews")
    op.drop_index(op.f("ix_reviews_queue_entry_id"), table_name="reviews")
    op.drop_index(op.f("ix_reviews_item_id"), table_name="reviews")
    op.drop_table("reviews")
    op.drop_index("ix_review_queue_suite_status", table_name="review_queue")
    op.drop_index(op.f("ix_review_queue_item_id"), table_name="review_queue")
    op.drop_table("review_queue")
    op.drop_index(op.f("ix_labels_item_id"), table_name="labels")
    op.drop_table("labels")
    # Calibration scores are no machine verdicts: without their run they would pass for ones.
    op.execute("DELETE FROM scores WHERE calibration_run_id IS NOT NULL")
    op.drop_index(
        "uq_scores_calibration_item_repeat", table_name="scores", postgresql_where=sa.text(_CALIBRATION), sqlite_where=sa.text(_CALIBRATION)
    )
    op.drop_index(
        "uq_scores_active_item_criteria", table_name="scores", postgresql_where=sa.text(_ACTIVE_MACHINE), sqlite_where=sa.text(_ACTIVE_MACHINE)
    )
    op.drop_index(op.f("ix_scores_calibration_run_id"), table_name="scores")
    with _views_set_aside(), op.batch_alter_table("scores") as batch:
        batch.drop_constraint(op.f("fk_scores_calibration_run_id_calibration_runs"), type_="foreignkey")
        batch.drop_column("calibration_repeat")
        batch.drop_column("calibration_run_id")
    op.create_index(
        "uq_scores_active_item_criteria",
        "scores",
        ["item_id", "criteria_hash"],
        unique=True,
        postgresql_where=sa.text(_ACTIVE),
        sqlite_where=sa.text(_ACTIVE),
    )
    op.drop_index("ix_noise_estimates_hash_computed", table_name="noise_estimates")
    op.drop_table("noise_estimates")
    op.drop_index("ix_calibration_runs_suite_created", table_name="calibration_runs")
    op.drop_index(op.f("ix_calibration_runs_batch_id"), table_name="calibration_runs")
    op.drop_table("calibration_runs")
