"""The declarative base every table of the store derives from, and the column types they share."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase

JsonDoc = JSON().with_variant(JSONB(), "postgresql")
# The per-item documents (an item's payload, a score's and a component's usage and details) are
# plain JSON text on Postgres too: no query looks inside them but for ``->`` / ``->>``, which JSON
# has as well, and the text is 10-30 % smaller than JSONB and cheaper to write (migration 0010).
# Python ``None`` is SQL NULL there (no bytes) rather than a JSON ``null``; both read back as ``None``.
JsonText = JSON()
NullableJsonText = JSON(none_as_null=True)

# Stable constraint names so Alembic migrations and autogenerate agree on every backend.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JsonDoc, datetime: DateTime(timezone=True)}
