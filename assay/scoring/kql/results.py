"""Results match: do the rows the generated query returned contain the expected rows?

Rows are compared whole, each value kept with its column (a row is a dict keyed by lower-cased
column name), never as a bag of loose values:

- only the expected columns are compared: extra generated columns are free, as in schema match,
  while a missing one makes the row differ;
- numbers compare by value (``1`` ≡ ``1.0``; floats to 12 significant digits, so engine rounding
  noise is not a difference), strings as text (``"1"`` is not ``1``), booleans as booleans, every
  null as one null; datetimes in UTC; dynamic values as canonical JSON;
- row order is ignored (rows are a multiset) unless ``ordered``: then expected row *i* must be
  generated row *i*;
- the first ``max_rows`` expected rows are compared.

Scores, with E = the compared expected rows and G the generated rows::

    recall    = expected rows found in G / |E|          (design 000's formula, the default)
    precision = generated rows (first max_rows) found among the expected rows / their count
    f1        = 2 · recall · precision / (recall + precision)    (also penalises extra rows)

When the expected query returned no rows, the score is 1.0 if the generated query returned none
either and 0.0 otherwise, in both modes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal

ResultsMode = Literal["recall", "f1"]
Row = dict[str, Any]

SAMPLE_ROWS = 3  # mismatching rows shown in the details

_MISSING = ("missing",)  # a column the generated row lacks: equals nothing, not even null
_NULL = ("null",)


def _value_key(value: Any) -> Hashable:
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | Decimal):
        return ("number", value)  # equal numbers hash equal across int, float and Decimal
    if isinstance(value, float):
        if math.isnan(value):
            return _NULL  # Kusto has no NaN in results; engines hand null back as NaN
        return ("number", float(format(value, ".12g")))
    if isinstance(value, str):
        return ("text", value)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return ("datetime", value)
    if isinstance(value, date | time | timedelta):
        return (type(value).__name__, value)
    return ("dynamic", json.dumps(value, sort_keys=True, default=str))


def _row_key(row: Row, columns: Sequence[str]) -> tuple[Hashable, ...]:
    lowered = {str(k).lower(): v for k, v in row.items()}
    return tuple(_value_key(lowered[c]) if c in lowered else _MISSING for c in columns)


def _jsonable(row: Row) -> Row:
    plain = str | int | float | bool | list | dict
    return {k: v if v is None or isinstance(v, plain) else str(v) for k, v in row.items()}


def compare_rows(
    expected: Sequence[Row],
    generated: Sequence[Row],
    *,
    ordered: bool,
    mode: ResultsMode = "recall",
    max_rows: int = 100,
) -> tuple[float, dict[str, Any]]:
    """The results-match score of ``generated`` against ``expected`` and what differed."""
    compared = expected[:max_rows]
    details: dict[str, Any] = {
        "mode": mode,
        "ordered": ordered,
        "expected_rows": len(expected),
        "generated_rows": len(generated),
        "compared_rows": len(compared),
    }
    if not compared:
        details["reason"] = "the expected query returned no rows"
        return (1.0 if not generated else 0.0), details

    columns = list(dict.fromkeys(str(k).lower() for row in compared for k in row))
    expected_keys = [_row_key(row, columns) for row in compared]
    shown = generated[:max_rows]
    if ordered:
        shown_keys = [_row_key(row, columns) for row in shown]
        matches = [e == g for e, g in zip(expected_keys, shown_keys)]
        found = sum(matches)
        missing = [row for i, row in enumerate(compared) if i >= len(matches) or not matches[i]]
    else:
        found, missing = _found_in(compared, expected_keys, Counter(_row_key(row, columns) for row in generated))

    recall = found / len(compared)
    details.update(matched_rows=found, recall=round(recall, 6))
    details["missing_rows"] = [_jsonable(r) for r in missing[:SAMPLE_ROWS]]
    if mode == "recall":
        return recall, details

    if ordered:
        kept = found
        extra = [row for i, row in enumerate(shown) if i >= len(matches) or not matches[i]]
    else:
        shown_keys = [_row_key(row, columns) for row in shown]
        kept, extra = _found_in(shown, shown_keys, Counter(_row_key(row, columns) for row in expected))
    precision = kept / len(shown) if shown else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    details.update(precision=round(precision, 6), f1=round(f1, 6))
    details["extra_rows"] = [_jsonable(r) for r in extra[:SAMPLE_ROWS]]
    return f1, details


def _found_in(rows: Sequence[Row], keys: list[tuple[Hashable, ...]], pool: Counter) -> tuple[int, list[Row]]:
    """How many of ``rows`` the multiset ``pool`` holds (each pooled row used once; ``pool`` is
    consumed), and the rows it lacks."""
    found, unmatched = 0, []
    for row, key in zip(rows, keys):
        if pool[key] > 0:
            pool[key] -= 1
            found += 1
        else:
            unmatched.append(row)
    return found, unmatched
