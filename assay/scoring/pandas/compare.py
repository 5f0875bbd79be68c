"""Comparing a generated result with the expected one (the correctness metric's rules).

Both results arrive as tables: the sandbox's encoding (:mod:`assay.scoring.sandbox.encode`) for
code that ran, or an item's ``expected_result`` (JSON). The rules:

1. **Shapes.** A Series is a one-column frame, a scalar a 1×1 frame. Array-likes are answers too
   (how each crosses the sandbox boundary: :mod:`assay.scoring.sandbox.encode`): a list, tuple,
   1-D numpy array, pandas ExtensionArray (``unique()`` of a string, categorical, nullable or
   datetime column) or Index is one column in its own order (a MultiIndex one column per level, a
   list of equally long tuples rows); a set is one column with no order; a dict is a Series (keys
   as its index). So ``df['b'].unique()``, ``df['b'].drop_duplicates()``, ``set(df['b'])`` and
   ``df['b'].unique().tolist()`` all answer "which b". A *meaningful* index (named, a MultiIndex, or non-integer labels: groupby keys,
   ``value_counts()``) is part of the result as leading columns; an unnamed integer index (row
   labels left by filtering) is not. When the generated result has index columns and the
   expected one has none, the comparison is also tried without them, and the better one counts
   (a Series of means keyed by its index still answers "the mean").
2. **Cells.** Numbers compare within a tolerance (``rel_tol`` 1e-6 and ``abs_tol`` 1e-9 by
   default; suite arguments); integers, floats and booleans are numbers. NaN, None, NaT and NA
   are one null. Timestamps, dates and ISO-8601 strings compare as instants (UTC when they carry
   a zone). Everything else compares exactly.
3. **Columns.** Matched by name where the names agree (case and punctuation ignored), then the
   rest by values: each remaining expected column goes to the remaining generated column holding
   the most of the same values, so an alias (``agg(avg=('salary', 'mean'))`` for ``salary``) is
   not an error. Expected columns left unmatched are missing; generated columns left over are
   extra.
4. **Rows.** A bag (multiset) unless the question asks for an order (``sorted``, ``in order``,
   ``ascending``, ``descending``, ...; an item can say so itself with ``order_matters``), so the
   first-appearance order of ``unique()`` and the order of a set never count unless an order is
   asked for. An ordered comparison accepts any order that agrees with the expected one on a column
   the expected rows are sorted by (so ties may come in any order). A set has no order to agree:
   when an order is asked for, a set of more than one member is an answer in the wrong order.
5. **Score.** 1.0 for the same rows (in order, when order matters) over every expected column;
   ×0.9 when the generated result has extra columns; 0.4 when the rows are right but the order
   is not. Otherwise partial credit, at most 0.4: ``0.4 × column recall × row F1`` (×0.9 for
   extra columns). No matched column: 0. (With the suite's weights and threshold 0.85, a
   result that is not fully right cannot pass, whatever the other components say.)
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

ORDER_PENALTY = 0.4
EXTRA_COLUMNS = 0.9
PARTIAL_CAP = 0.4
PAIRWISE_LIMIT = 250_000

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?(?:Z|[+-]\d{2}:?\d{2})?$")


@dataclass(frozen=True)
class Tolerance:
    rel_tol: float = 1e-6
    abs_tol: float = 1e-9


@dataclass
class CTable:
    """A result in canonical form."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    index_columns: int = 0
    dtypes: list[str] | None = None
    unordered: bool = False  # a set: its rows have no order to compare

    def without_index(self) -> CTable:
        k = self.index_columns
        return CTable(self.columns[k:], [r[k:] for r in self.rows], 0, self.dtypes[k:] if self.dtypes else None, self.unordered)


# --- canonical cells -------------------------------------------------------------------------------


def _instant(text: str) -> tuple[str, str] | None:
    if not _ISO.match(text):
        return None
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return ("ts", moment.isoformat(timespec="microseconds"))


def canonical_cell(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, str):
        return _instant(value) or value
    if isinstance(value, list):
        return ("seq", tuple(canonical_cell(v) for v in value))
    if isinstance(value, dict):
        if "$float" in value:
            return float(value["$float"])
        if "$ts" in value:
            return _instant(str(value["$ts"])) or ("repr", str(value["$ts"]))
        if "$date" in value:
            return _instant(str(value["$date"])) or ("repr", str(value["$date"]))
        if "$td" in value:
            return ("td", float(value["$td"]))
        if "$seq" in value:
            return ("seq", tuple(canonical_cell(v) for v in value["$seq"]))
        if "$repr" in value:
            return ("repr", str(value["$repr"]))
        return ("repr", json.dumps(value, sort_keys=True, default=str))
    return ("repr", repr(value))


def from_encoded(encoded: dict[str, Any]) -> CTable:
    """A sandbox result (``encode_result``) in canonical form."""
    columns = [str(c) for c in encoded.get("columns", [])]
    rows = [tuple(canonical_cell(c) for c in row) for row in encoded.get("rows", [])]
    dtypes = list(encoded.get("dtypes") or []) or None
    return CTable(columns, rows, int(encoded.get("index_columns", 0)), dtypes, encoded.get("ordered") is False)


def from_expected(value: Any) -> CTable:
    """An item's ``expected_result`` in canonical form: a scalar, a list of scalars (one column),
    a list of records, or ``{"columns": [...], "data": [[...], ...]}``."""
    if isinstance(value, dict) and set(value) >= {"columns", "data"}:
        columns = [str(c) for c in value["columns"]]
        return CTable(columns, [tuple(canonical_cell(c) for c in row) for row in value["data"]])
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        columns: list[str] = []
        for record in value:
            for key in record:
                if key not in columns:
                    columns.append(key)
        return CTable([str(c) for c in columns], [tuple(canonical_cell(r.get(c)) for c in columns) for r in value])
    if isinstance(value, list):
        return CTable(["value"], [(canonical_cell(v),) for v in value])
    return CTable(["value"], [(canonical_cell(value),)])


# --- cell and row comparison -------------------------------------------------------------------------


def cells_close(a: Any, b: Any, tol: Tolerance) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=tol.rel_tol, abs_tol=tol.abs_tol)
    if isinstance(a, tuple) and isinstance(b, tuple):
        if a[0] != b[0]:
            return False
        if a[0] == "td":
            return math.isclose(a[1], b[1], rel_tol=tol.rel_tol, abs_tol=max(tol.abs_tol, 1e-6))
        if a[0] == "seq":
            return len(a[1]) == len(b[1]) and all(cells_close(x, y, tol) for x, y in zip(a[1], b[1]))
        return a == b
    return a == b


def _key(cell: Any) -> Any:
    if isinstance(cell, float) and math.isfinite(cell):
        return ("n", float(f"{cell:.9g}"))
    if isinstance(cell, tuple) and cell and cell[0] == "seq":
        return ("seq", tuple(_key(c) for c in cell[1]))
    if isinstance(cell, tuple) and cell and cell[0] == "td":
        return ("td", float(f"{cell[1]:.9g}"))
    return cell


def _rows_close(a: tuple, b: tuple, tol: Tolerance) -> bool:
    return len(a) == len(b) and all(cells_close(x, y, tol) for x, y in zip(a, b))


def bag_match(expected: list[tuple], generated: list[tuple], tol: Tolerance) -> int:
    """How many expected rows find a generated row of their own (a multiset intersection, within
    the tolerance)."""
    pool: dict[Any, list[tuple]] = defaultdict(list)
    for row in generated:
        pool[tuple(_key(c) for c in row)].append(row)
    matched = 0
    left: list[tuple] = []
    for row in expected:
        bucket = pool.get(tuple(_key(c) for c in row))
        if bucket:
            bucket.pop()
            matched += 1
        else:
            left.append(row)
    rest = [row for bucket in pool.values() for row in bucket]
    if left and rest and len(left) * len(rest) <= PAIRWISE_LIMIT:
        used = [False] * len(rest)
        for row in left:
            for j, other in enumerate(rest):
                if not used[j] and _rows_close(row, other, tol):
                    used[j] = True
                    matched += 1
                    break
    return matched


def _norm_name(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def _column(table: CTable, index: int) -> list[tuple]:
    return [(row[index],) for row in table.rows]


def column_similarity(expected: CTable, e: int, generated: CTable, g: int, tol: Tolerance) -> float:
    size = max(len(expected.rows), len(generated.rows))
    if size == 0:
        return 0.0
    return bag_match(_column(expected, e), _column(generated, g), tol) / size


def align_columns(expected: CTable, generated: CTable, tol: Tolerance) -> tuple[list[tuple[int, int]], dict[str, list[str]]]:
    """Pairs (expected column, generated column): by name first, then by values."""
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    by: dict[str, list[str]] = {"name": [], "values": []}
    for e, name in enumerate(expected.columns):
        for g, other in enumerate(generated.columns):
            if g not in used and _norm_name(other) == _norm_name(name):
                pairs.append((e, g))
                used.add(g)
                by["name"].append(name)
                break
    matched_e = {e for e, _ in pairs}
    left_e = [e for e in range(len(expected.columns)) if e not in matched_e]
    left_g = [g for g in range(len(generated.columns)) if g not in used]
    candidates = []
    for e in left_e:
        for g in left_g:
            similarity = column_similarity(expected, e, generated, g, tol)
            if similarity > 0:
                candidates.append((-similarity, abs(e - g), e, g))
    for _, _, e, g in sorted(candidates):
        if e in matched_e or g in used:
            continue
        pairs.append((e, g))
        matched_e.add(e)
        used.add(g)
        by["values"].append(expected.columns[e])
    pairs.sort()
    return pairs, by


def _sortable(value: Any) -> Any:
    if isinstance(value, float):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, tuple) and value and value[0] in ("ts", "td"):
        return (2, value[1])
    return None


def _monotonic(values: list[Any], descending: bool) -> bool:
    keys = [_sortable(v) for v in values]
    if any(k is None for k in keys) or len({k[0] for k in keys}) > 1:  # type: ignore[index]
        return False
    pairs = list(zip(keys, keys[1:]))
    if descending:
        return all(a >= b for a, b in pairs)  # type: ignore[operator]
    return all(a <= b for a, b in pairs)  # type: ignore[operator]


def order_agrees(expected: list[tuple], generated: list[tuple], tol: Tolerance) -> bool:
    """Same sequence, or sorted the same way on a column the expected rows are sorted by."""
    if len(expected) != len(generated):
        return False
    if all(_rows_close(a, b, tol) for a, b in zip(expected, generated)):
        return True
    for j in range(len(expected[0]) if expected else 0):
        column = [row[j] for row in expected]
        if len({_key(v) for v in column}) < 2:
            continue
        for descending in (True, False):
            if _monotonic(column, descending) and _monotonic([row[j] for row in generated], descending):
                return True
    return False


# --- the comparison ----------------------------------------------------------------------------------


def _compare_once(expected: CTable, generated: CTable, ordered: bool, tol: Tolerance) -> tuple[float, dict[str, Any]]:
    pairs, by = align_columns(expected, generated, tol)
    matched_g = {g for _, g in pairs}
    missing = [c for e, c in enumerate(expected.columns) if e not in {p[0] for p in pairs}]
    extra = [c for g, c in enumerate(generated.columns) if g not in matched_g]
    details: dict[str, Any] = {
        "columns_expected": expected.columns,
        "columns_generated": generated.columns,
        "column_mapping": {expected.columns[e]: generated.columns[g] for e, g in pairs},
        "matched_by_name": by["name"],
        "matched_by_values": by["values"],
        "missing_columns": missing,
        "extra_columns": extra,
        "rows_expected": len(expected.rows),
        "rows_generated": len(generated.rows),
    }
    if not pairs:
        details.update(rows_matched=0, row_precision=0.0, row_recall=0.0, match=False)
        return 0.0, details
    exp_rows = [tuple(row[e] for e, _ in pairs) for row in expected.rows]
    gen_rows = [tuple(row[g] for _, g in pairs) for row in generated.rows]
    matched = bag_match(exp_rows, gen_rows, tol)
    if not exp_rows and not gen_rows:
        precision = recall = 1.0
    else:
        precision = matched / len(gen_rows) if gen_rows else 0.0
        recall = matched / len(exp_rows) if exp_rows else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    column_recall = len(pairs) / len(expected.columns) if expected.columns else 1.0
    details.update(rows_matched=matched, row_precision=round(precision, 6), row_recall=round(recall, 6))
    same_rows = not missing and matched == len(exp_rows) == len(gen_rows)
    if same_rows:
        score = 1.0
        if ordered:
            agrees = order_agrees(exp_rows, gen_rows, tol) and not (generated.unordered and len(gen_rows) > 1)
            details["order_ok"] = agrees
            if generated.unordered and len(gen_rows) > 1:
                details["order_note"] = "the answer is a set, which has no order; the question asks for one"
            if not agrees:
                score = ORDER_PENALTY
    else:
        score = PARTIAL_CAP * column_recall * f1
    if extra:
        score *= EXTRA_COLUMNS
    details["match"] = same_rows and score == 1.0
    return score, details


def compare(expected: CTable, generated: CTable, *, ordered: bool, tol: Tolerance | None = None) -> tuple[float, dict[str, Any]]:
    """Score in [0, 1] and the details of the best reading (see the module docstring)."""
    tol = tol or Tolerance()
    variants = [("as returned", generated)]
    if generated.index_columns and not expected.index_columns:
        variants.append(("generated index dropped", generated.without_index()))
    best: tuple[float, dict[str, Any]] | None = None
    for name, candidate in variants:
        score, details = _compare_once(expected, candidate, ordered, tol)
        details["reading"] = name
        if best is None or score > best[0]:
            best = (score, details)
    assert best is not None
    score, details = best
    details.update(ordered=ordered, tolerance={"rel_tol": tol.rel_tol, "abs_tol": tol.abs_tol})
    return score, details
