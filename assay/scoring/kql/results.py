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
- every row is compared, on both sides (a sample of the first rows would miss extra rows past it,
  and which rows come first is itself open when the order is).

When the expected query's output is not uniquely determined (ties, ``take`` without a sort, the
default join kind: :mod:`assay.scoring.kql.ties`), E is the valid answer closest to the generated
rows (:func:`best_answer`), never one picked by an arbitrary order.

Scores, with E = the expected rows and G the generated rows::

    recall    = expected rows found in G / |E|          (the KQL scoring design's formula, the default)
    precision = generated rows found among the expected rows / |G|
    f1        = 2 · recall · precision / (recall + precision)    (also penalises extra rows)

When the expected query returned no rows, the score is 1.0 if the generated query returned none
either and 0.0 otherwise, in both modes.

Renamed columns (:func:`align_columns`, used by results match and schema match alike). An alias
changes a column's name, not its values: ``summarize count()`` returns ``count_`` where
``summarize Count = count()`` returns ``Count``. So an expected column that the generated result
lacks by name (names compare case-insensitively) is matched to a generated column whose name no
expected column has, when the data show it is the same column:

- the two columns hold the same multiset of normalised values (as above: ``1`` ≡ ``1.0``, nulls as
  one) over all the rows of both results, so both results have as many rows; a generated column
  that some row lacks is never matched;
- the column must carry evidence: a column of one repeated value over two rows or more (all null,
  all ``0``, all the same count) is never matched, and neither is a one-row result whose value is
  trivial (null, ``true`` / ``false``, ``0``, ``1``, ``""``): such values agree by coincidence;
- each generated column is matched at most once; the expected columns are taken in their order, and
  when several generated columns qualify, the one at the same position wins, else the nearest
  (the earlier on a tie);
- no rows, no evidence: an empty result matches nothing.

A matched column is then compared under the expected name, row by row with the other columns, so a
wrong pairing still fails the rows. The details record the matches as ``renamed_columns``
(expected name -> generated name). This cannot turn a wrong aggregation into a right one: a column
whose values differ is not matched, and one whose values agree *everywhere* (``dcount(EventId)``
where every id is distinct, so it equals ``count()``) agrees on the data too, under any name; the
semantic similarity is what tells such twins apart.
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


def value_key(value: Any) -> Hashable:
    """A value as values compare (see the module docstring)."""
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


def column_key(name: Any) -> str:
    """A column name as names are compared: case-insensitively, surrounding blanks ignored."""
    return str(name).strip().lower()


def _row_key(row: Row, columns: Sequence[str]) -> tuple[Hashable, ...]:
    lowered = {column_key(k): v for k, v in row.items()}
    return tuple(value_key(lowered[c]) if c in lowered else _MISSING for c in columns)


# One-row values that agree by coincidence too often to say two columns are the same.
_TRIVIAL = frozenset({_NULL, ("bool", True), ("bool", False), ("number", 0), ("number", 1), ("text", "")})


def _profile(rows: Sequence[dict[str, Any]], column: str) -> Counter | None:
    """The multiset of a column's normalised values over ``rows`` (keyed by :func:`column_key`), or
    None when it is no evidence of identity: a row lacks the column, the column repeats one value
    over several rows, or its one row holds a trivial value."""
    values: Counter = Counter()
    for row in rows:
        if column not in row:
            return None
        values[value_key(row[column])] += 1
    if not values or (len(rows) > 1 and len(values) == 1):
        return None
    if len(rows) == 1 and next(iter(values)) in _TRIVIAL:
        return None
    return values


def align_columns(
    expected_columns: Sequence[str],
    expected_rows: Sequence[Row],
    generated_columns: Sequence[str],
    generated_rows: Sequence[Row],
) -> dict[str, str]:
    """Expected column -> the generated column it was renamed to, by the rule in the module
    docstring (names as given; only columns missing by name can appear)."""
    expected = list(dict.fromkeys(str(c) for c in expected_columns))
    generated = list(dict.fromkeys(str(c) for c in generated_columns))
    expected_keys = {column_key(c) for c in expected}
    generated_keys = {column_key(c) for c in generated}
    missing = [(i, c) for i, c in enumerate(expected) if column_key(c) not in generated_keys]
    spare = [(j, c) for j, c in enumerate(generated) if column_key(c) not in expected_keys]
    if not missing or not spare or not expected_rows or len(expected_rows) != len(generated_rows):
        return {}
    lowered_expected = [{column_key(k): v for k, v in row.items()} for row in expected_rows]
    lowered_generated = [{column_key(k): v for k, v in row.items()} for row in generated_rows]
    spare_profiles = {c: _profile(lowered_generated, column_key(c)) for _, c in spare}
    renamed: dict[str, str] = {}
    for i, name in missing:
        want = _profile(lowered_expected, column_key(name))
        if want is None:
            continue
        taken = set(renamed.values())
        candidates = [(j, c) for j, c in spare if c not in taken and spare_profiles[c] == want]
        if candidates:
            renamed[name] = min(candidates, key=lambda jc: (abs(jc[0] - i), jc[0]))[1]
    return renamed


def compare_rows(
    expected: Sequence[Row],
    generated: Sequence[Row],
    *,
    ordered: bool,
    mode: ResultsMode = "recall",
    expected_columns: Sequence[str] | None = None,
    generated_columns: Sequence[str] | None = None,
    align: bool = True,
    renamed: dict[str, str] | None = None,
) -> tuple[float, dict[str, Any]]:
    """The results-match score of ``generated`` against ``expected`` and what differed.

    ``expected_columns`` / ``generated_columns`` are the results' columns, in order (default: the
    keys of their rows); with ``align``, renamed columns are matched (:func:`align_columns`), unless
    ``renamed`` gives the matches already."""
    details: dict[str, Any] = {
        "mode": mode,
        "ordered": ordered,
        "expected_rows": len(expected),
        "generated_rows": len(generated),
        "compared_rows": len(expected),
    }
    if not expected:
        details["reason"] = "the expected query returned no rows"
        return (1.0 if not generated else 0.0), details

    columns = list(dict.fromkeys(column_key(k) for row in expected for k in row))
    if renamed is None:
        renamed = {}
        if align:
            named = expected_columns if expected_columns is not None else _keys(expected)
            renamed = align_columns(named, expected, generated_columns if generated_columns is not None else _keys(generated), generated)
    if align:
        details["renamed_columns"] = renamed
    # The generated rows are read under the generated names of renamed columns.
    source = {column_key(e): column_key(g) for e, g in renamed.items()}
    generated_columns_read = [source.get(c, c) for c in columns]
    expected_keys = [_row_key(row, columns) for row in expected]
    if ordered:
        generated_keys = [_row_key(row, generated_columns_read) for row in generated]
        matches = [e == g for e, g in zip(expected_keys, generated_keys)]
        found = sum(matches)
        missing = [row for i, row in enumerate(expected) if i >= len(matches) or not matches[i]]
    else:
        found, missing = _found_in(
            expected, expected_keys, Counter(_row_key(row, generated_columns_read) for row in generated)
        )

    recall = found / len(expected)
    details.update(matched_rows=found, recall=round(recall, 6))
    details["missing_rows"] = [_jsonable(r) for r in missing[:SAMPLE_ROWS]]
    if mode == "recall":
        return recall, details

    if ordered:
        kept = found
        extra = [row for i, row in enumerate(generated) if i >= len(matches) or not matches[i]]
    else:
        generated_keys = [_row_key(row, generated_columns_read) for row in generated]
        kept, extra = _found_in(generated, generated_keys, Counter(_row_key(row, columns) for row in expected))
    precision = kept / len(generated) if generated else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    details.update(precision=round(precision, 6), f1=round(f1, 6))
    details["extra_rows"] = [_jsonable(r) for r in extra[:SAMPLE_ROWS]]
    return f1, details


def _jsonable(row: Row) -> Row:
    plain = str | int | float | bool | list | dict
    return {k: v if v is None or isinstance(v, plain) else str(v) for k, v in row.items()}


def _keys(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(str(k) for row in rows for k in row))


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


def best_answer(
    groups: Sequence[tuple[Sequence[Row], int]],
    ordered: bool,
    generated: Sequence[Row],
    renamed: dict[str, str],
) -> list[Row]:
    """Among the valid answers that ``groups`` describe (each group: candidate rows, how many a
    valid answer takes; :class:`assay.scoring.kql.ties.Answers`), the one closest to ``generated``:
    each group takes the generated rows it holds, up to its quota, then its other candidates in a
    canonical order. When ``ordered``, the groups follow one another and inside a group the rows
    the generated result holds come in its order, so a valid order of tied rows lines up.
    ``renamed``: expected column -> generated column (:func:`align_columns`)."""
    columns = list(dict.fromkeys(column_key(k) for rows, _ in groups for row in rows for k in row))
    source = {column_key(e): column_key(g) for e, g in renamed.items()}
    generated_keys = [_row_key(row, [source.get(c, c) for c in columns]) for row in generated]
    pools: list[dict[Hashable, list[Row]]] = []
    where: dict[Hashable, list[int]] = {}
    for index, (rows, _) in enumerate(groups):
        pool: dict[Hashable, list[Row]] = {}
        for row in rows:
            pool.setdefault(_row_key(row, columns), []).append(row)
        pools.append(pool)
        for key in pool:
            where.setdefault(key, []).append(index)
    taken: list[list[Row]] = [[] for _ in groups]
    for key in generated_keys:
        for index in where.get(key, ()):
            if len(taken[index]) < groups[index][1] and pools[index][key]:
                taken[index].append(pools[index][key].pop())
                break
    answer: list[Row] = []
    for index, (_, quota) in enumerate(groups):
        rest = sorted(pools[index].items(), key=lambda kv: repr(kv[0]))
        fill = [row for _, rows in rest for row in rows][: quota - len(taken[index])]
        answer += taken[index] + fill
    return answer
