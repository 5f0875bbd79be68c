"""Fewer index bytes per item: indexes no query reads, and partial ones where only a few rows matter

- ``ix_items_content_hash``: dropped. No query looks an item up by its content hash (it is shown,
  never searched); at ~100 bytes per item it was the largest index of ``items``.
- ``ix_scores_calibration_run_id``: dropped. ``uq_scores_calibration_item_repeat`` leads with
  ``calibration_run_id`` and holds every row where it is set, so it serves the same lookups (the
  run's scores, the cascade from ``calibration_runs``).
- ``ix_score_components_status_lease`` becomes ``ix_score_components_unlanded_status``: only
  unlanded rows (``pending``, ``in_progress``, ``deferred``), the ones the reconciler, the lease
  heartbeat and the batch lane look for; landed rows (nearly all of them) stay out. Keyed by status
  alone: entries share their keys (deduplicated), and a lease renewal changes no indexed column.
  The lease time was no help in it: every expired lease of a landed-since row is in the past too.
- ``ix_score_components_provider_batch_id``: only rows that sit in a provider batch (batch lane).

The per-item documents become plain JSON text on PostgreSQL (``items.payload``, ``scores.usage``,
``score_components.usage`` and ``.details``): nothing queries inside them but with ``->`` / ``->>``,
which ``json`` has too, and the text is 10-30 % smaller than JSONB (and cheaper to write). A JSON
``null`` in the nullable ones becomes SQL NULL (what the models now write for ``None``). This
rewrites those three tables once; the ``session_scores`` view, which reads ``details``, is set
aside and recreated around it. On SQLite every JSON column is text already: only the nulls change.

Revision ID: 0010
Revises: 0009
"""
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_UNLANDED = "status IN ('pending', 'in_progress', 'deferred')"
_IN_PROVIDER_BATCH = "provider_batch_id IS NOT NULL"
# (table, column, nullable): the per-item JSON documents.
_DOCUMENTS = (("items", "payload", False), ("scores", "usage", True), ("score_components", "usage", True), ("score_components", "details", True))


@contextmanager
def _pg_views_set_aside() -> Iterator[None]:
    """PostgreSQL refuses to change the type of a column a view reads (session_scores reads
    score_components.details): drop the views and recreate them from their own definitions."""
    views = op.get_bind().execute(sa.text("SELECT viewname, definition FROM pg_views WHERE schemaname = current_schema()")).all()
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    yield
    for name, definition in views:
        op.execute(f'CREATE VIEW "{name}" AS {definition}')


def _documents_to(target: str) -> None:
    with _pg_views_set_aside():
        for table, column, nullable in _DOCUMENTS:
            source = f"NULLIF({column}, 'null'::jsonb)" if nullable and target == "json" else column
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {target} USING {source}::{target}")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _documents_to("json")
    else:
        for table, column, nullable in _DOCUMENTS:
            if nullable:
                op.execute(f"UPDATE {table} SET {column} = NULL WHERE {column} = 'null'")
    op.drop_index("ix_items_content_hash", table_name="items")
    op.drop_index("ix_scores_calibration_run_id", table_name="scores")
    op.drop_index("ix_score_components_status_lease", table_name="score_components")
    op.create_index(
        "ix_score_components_unlanded_status",
        "score_components",
        ["status"],
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
    op.drop_index("ix_score_components_unlanded_status", table_name="score_components")
    op.create_index("ix_score_components_status_lease", "score_components", ["status", "lease_expires_at"], unique=False)
    op.create_index("ix_scores_calibration_run_id", "scores", ["calibration_run_id"], unique=False)
    op.create_index("ix_items_content_hash", "items", ["content_hash"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        _documents_to("jsonb")
