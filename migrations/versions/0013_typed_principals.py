"""Typed principals; labels belong to who wrote them; API suites have owners

A principal is now stored as its type and its name (``key:alice``, ``proxy:alice``: see
``assay.scoring.principals``), so a proxy user and an API key of the same name are two principals.
The names stored before are mapped once, in every column that holds a principal: Idempotency scopes
(``batches.idempotency_scope``), reviewers (``reviews.reviewer``) and annotators (``labels.annotator``).
A name becomes ``key:NAME`` when an entry of ``ASSAY_API_KEYS`` (as configured where this migration
runs) has that name, else ``proxy:NAME``. Run it with the API's own settings.

``labels.written_by`` records the principal that stored a label; the store did not record uploaders
before, so an existing label counts as written by its annotator. ``labels.source`` gains ``import``:
another annotator's label brought in by the uploader, never replacing a label.

``suites.owner`` is the principal that created an API suite (it, or an operator of
``ASSAY_OPERATOR_KEYS``, may change the suite). Existing API suites get none: only operators change them.

Downgrading strips the types again, except where that would merge two principals' rows (those keep
the typed name), and turns imports into uploads.

Revision ID: 0013
Revises: 0012
"""
import logging

import sqlalchemy as sa
from alembic import op

from assay.scoring.principals import IDENTITY_MAX, KEY, PROXY

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")

# (table, column) holding a principal's name.
_PRINCIPAL_COLUMNS = (("batches", "idempotency_scope"), ("reviews", "reviewer"), ("labels", "annotator"))
# The unique key each column is part of (other columns), so that a downgrade never merges two rows.
_UNIQUE_WITH = {"batches": ("idempotency_key",), "reviews": None, "labels": ("suite_name", "item_id")}
_OLD_SOURCES = "source IN ('upload', 'review')"
_NEW_SOURCES = "source IN ('upload', 'import', 'review')"


def _key_names() -> list[str]:
    from assay.settings import configured_keys, get_settings

    return sorted({key.name for key in configured_keys(get_settings())})


def _typed(column: str, key_names: list[str]) -> tuple[str, dict]:
    """SQL for the typed form of ``column``'s bare name, with its parameters (as in ``legacy_identity``)."""
    if not key_names:
        return f"substr('{PROXY}:' || {column}, 1, {IDENTITY_MAX})", {}
    names = ", ".join(f":key_{n}" for n in range(len(key_names)))
    expression = (
        f"substr(CASE WHEN {column} IN ({names}) THEN '{KEY}:' ELSE '{PROXY}:' END || {column}, 1, {IDENTITY_MAX})"
    )
    return expression, {f"key_{n}": name for n, name in enumerate(key_names)}


def upgrade() -> None:
    with op.batch_alter_table("suites") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=255), nullable=True))
    with op.batch_alter_table("labels") as batch:
        batch.add_column(sa.Column("written_by", sa.String(length=255), nullable=True))
    key_names = _key_names()
    connection = op.get_bind()
    for table, column in _PRINCIPAL_COLUMNS:
        typed, params = _typed(column, key_names)
        done = connection.execute(sa.text(f"UPDATE {table} SET {column} = {typed} WHERE {column} IS NOT NULL"), params)
        log.info("typed principals: %s.%s: %d row(s) mapped (%d API key name(s) configured)", table, column, done.rowcount, len(key_names))
    connection.execute(sa.text("UPDATE labels SET written_by = annotator"))
    with op.batch_alter_table("labels") as batch:
        batch.alter_column("written_by", existing_type=sa.String(length=255), nullable=False)
        batch.drop_constraint(op.f("ck_labels_source"), type_="check")
        batch.create_check_constraint(op.f("ck_labels_source"), _NEW_SOURCES)


def _strip(table: str, column: str) -> None:
    own = f"{table}.{column}"  # qualified: the subqueries below read the same table as ``other``
    bare = f"CASE WHEN {own} LIKE '{KEY}:%' THEN substr({own}, {len(KEY) + 2}) ELSE substr({own}, {len(PROXY) + 2}) END"
    typed = f"({own} LIKE '{KEY}:%' OR {own} LIKE '{PROXY}:%')"
    unique_with = _UNIQUE_WITH[table]
    keeps_apart = ""
    if unique_with is not None:
        same = " AND ".join(f"other.{c} = {table}.{c}" for c in unique_with)
        keeps_apart = f" AND NOT EXISTS (SELECT 1 FROM {table} AS other WHERE {same} AND other.{column} = ({bare}))"
        # Two typed names with one bare name on one key: only the key's row loses its type.
        keeps_apart += (
            f" AND ({own} LIKE '{KEY}:%' OR NOT EXISTS (SELECT 1 FROM {table} AS other WHERE {same}"
            f" AND other.{column} = '{KEY}:' || ({bare})))"
        )
    op.execute(f"UPDATE {table} SET {column} = {bare} WHERE {typed}{keeps_apart}")


def downgrade() -> None:
    op.execute("UPDATE labels SET source = 'upload' WHERE source = 'import'")
    with op.batch_alter_table("labels") as batch:
        batch.drop_constraint(op.f("ck_labels_source"), type_="check")
        batch.create_check_constraint(op.f("ck_labels_source"), _OLD_SOURCES)
        batch.drop_column("written_by")
    for table, column in _PRINCIPAL_COLUMNS:
        _strip(table, column)
    with op.batch_alter_table("suites") as batch:
        batch.drop_column("owner")
