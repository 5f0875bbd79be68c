"""Slices by metadata: one metadata key of the items splits a summary, a comparison or an agreement report.

``by`` is ``metadata.KEY``; an item's slice is the value of ``KEY`` in its ``metadata`` object — a
string as it is, a number or a boolean as its JSON text (``3``, ``true``), and an item without the key
(or with ``null``) falls in the ``missing`` slice. A key holding an object or an array in any item is
refused (:class:`~assay.scoring.errors.BadRequest`): slicing by a structure would split on its
spelling. Readers fetch only the value's JSON text (:func:`value_json`, ``->`` on PostgreSQL and on
SQLite), never the payload.

Bounded (invariant 11): the ``MAX_SLICES`` largest values are kept, the rest are grouped in one
``other`` slice that says how many values it holds. A slice with fewer than ``MIN_SLICE_ITEMS`` items
(the n its statistics are over) is kept and flagged ``small`` with a note, never hidden and never
read as a finding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Text, cast, literal

from assay.scoring.errors import BadRequest
from assay.scoring.store.models import Item

BY_PREFIX = "metadata."
MIN_SLICE_ITEMS = 10
MAX_SLICES = 20
# A key is a name, not a path: it is spliced into SQLite's JSON path (no quoting there).
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
VALUE, MISSING, OTHER = "value", "missing", "other"
SMALL_NOTE = f"fewer than {MIN_SLICE_ITEMS} items: too few to read a difference from"

T = TypeVar("T")


def metadata_key(by: str) -> str:
    """The KEY of ``by`` (``metadata.KEY``); BadRequest for anything else."""
    key = by[len(BY_PREFIX) :] if by.startswith(BY_PREFIX) else None
    if key is None or not KEY_PATTERN.match(key):
        raise BadRequest(
            f"by={by!r}: slice by metadata.KEY, where KEY is 1-100 letters, digits, '_' or '-' (e.g. metadata.product)"
        )
    return key


def label(value: Any, key: str) -> str | None:
    """The slice of a decoded metadata value: None for no value; BadRequest for an object or array."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    kind = "an object" if isinstance(value, dict) else "an array" if isinstance(value, list) else type(value).__name__
    raise BadRequest(
        f"metadata.{key} holds {kind} in some items; slices need a string, number or boolean "
        f"(slice by a key inside it by mapping it to its own metadata key in the suite's fields)"
    )


def slice_of(item_payload: Mapping[str, Any], key: str) -> str | None:
    """The slice of one item (its stored payload) by ``metadata.KEY``."""
    metadata = item_payload.get("metadata")
    return label(metadata.get(key) if isinstance(metadata, dict) else None, key)


def value_json(key: str) -> ColumnElement[Any]:
    """SQL: the JSON text of the items' ``metadata.KEY`` (NULL without it), on PostgreSQL and SQLite.

    Decode it with :func:`label_of_json`. The JSON text keeps a value's type (SQLite's ``json_extract``
    would turn ``true`` into 1)."""
    if not KEY_PATTERN.match(key):  # callers pass metadata_key()'s result; a guard for the path below
        raise BadRequest(f"not a metadata key: {key!r}")
    payload = Item.__table__.c.payload
    return cast(payload.op("->")(literal("metadata")).op("->")(literal(key)), Text).label("slice_json")


def label_of_json(text: str | None, key: str) -> str | None:
    return None if text is None else label(json.loads(text), key)


@dataclass(frozen=True)
class Slice(Generic[T]):
    """One slice and its rows: a metadata value, the items without one, or every value past the cap."""

    kind: str  # VALUE, MISSING or OTHER
    value: str | None  # the metadata value (VALUE only)
    values: int  # distinct metadata values it holds (OTHER: how many were grouped)
    rows: list[T]

    def describe(self, n: int) -> dict[str, Any]:
        """The slice's name and its size flag, for a report; ``n``: what its statistics are over."""
        notes = []
        if self.kind == OTHER:
            notes.append(f"{self.values} further values grouped: only the {MAX_SLICES} largest slices are kept apart")
        if n < MIN_SLICE_ITEMS:
            notes.append(SMALL_NOTE)
        return {"kind": self.kind, "value": self.value, "n": n, "small": n < MIN_SLICE_ITEMS, "note": "; ".join(notes) or None}


def group(
    rows: Iterable[T], slice_of_row: Callable[[T], str | None], *, size: Callable[[T], int] = lambda _: 1
) -> list[Slice[T]]:
    """Rows split by their slice: the ``MAX_SLICES`` largest values (by the sum of ``size`` over their rows;
    ties by value), then ``missing``, then ``other`` holding the remaining values' rows. ``size`` lets
    pre-aggregated rows (a count per value) be grouped by the same rule as single items."""
    by_value: dict[str | None, list[T]] = {}
    for row in rows:
        by_value.setdefault(slice_of_row(row), []).append(row)
    sizes = {value: sum(size(row) for row in found) for value, found in by_value.items()}
    values = sorted((v for v in by_value if v is not None), key=lambda v: (-sizes[v], v))
    kept, rest = values[:MAX_SLICES], values[MAX_SLICES:]
    out = [Slice(VALUE, v, 1, by_value[v]) for v in kept]
    if None in by_value:
        out.append(Slice(MISSING, None, 0, by_value[None]))
    if rest:
        out.append(Slice(OTHER, None, len(rest), [row for v in rest for row in by_value[v]]))
    return out
