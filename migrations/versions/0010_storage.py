"""Fewer index bytes per item: indexes no query reads, and partial ones where only a few rows matter

- ``ix_items_content_hash``: dropped. No query looks an item up by its content hash (it is shown,
  never searched); at ~100 bytes per item it was the largest index of ``items``.
- ``ix_scores_calibration_run_id``: dropped. ``uq_scores_calibration_item_repeat`` leads with
  ``calibration_run_id`` and holds every row where it is set, so it serves the same lookups (the
  run's scores, the cascade from ``calibration_runs``).
- ``ix_score_components_status_lease``: only unlanded rows (``pending``, ``in_progress``,
  ``deferred``), the ones claims, the reconciler and the batch lane look for; landed rows (nearly
  all of them) stay out.
- ``ix_score_components_provider_batch_id``: only rows that sit in a provider batch (batch lane).

A metric component's ``usage`` is now written as SQL NULL instead of a JSON ``null`` (a model-only
change; rows written before keep theirs, both read back as ``None``: no table rewrite here).

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_UNLANDED = "status IN ('pending', 'in_progress', 'deferred')"
_IN_PROVIDER_BATCH = "provider_batch_id IS NOT NULL"


def upgrade() -> None:
    op.drop_index("ix_items_content_hash", table_name="items")
    op.drop_index("ix_scores_calibration_run_id", table_name="scores")
    op.drop_index("ix_score_components_status_lease", table_name="score_components")
    op.create_index(
        "ix_score_components_status_lease",
        "score_components",
        ["status", "lease_expires_at"],
        unique=False,
        postgresql_where=sa.text(_UNLANDED),
        sqlite_where=sa.text(_UNLANDED),
    )
    op.drop_index("ix_score_components_provider_batch_id", table_name="score_components")
    op.create_index(
        "ix_score_components_provider_batch_id",
        "score_components",
        ["provider_batch_id"],
        unique=False,
        postgresql_where=sa.text(_IN_PROVIDER_BATCH),
        sqlite_where=sa.text(_IN_PROVIDER_BATCH),
    )


def downgrade() -> None:
    op.drop_index("ix_score_components_provider_batch_id", table_name="score_components")
    op.create_index("ix_score_components_provider_batch_id", "score_components", ["provider_batch_id"], unique=False)
    op.drop_index("ix_score_components_status_lease", table_name="score_components")
    op.create_index("ix_score_components_status_lease", "score_components", ["status", "lease_expires_at"], unique=False)
    op.create_index("ix_scores_calibration_run_id", "scores", ["calibration_run_id"], unique=False)
    op.create_index("ix_items_content_hash", "items", ["content_hash"], unique=False)
