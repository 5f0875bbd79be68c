"""What an item requires of the code: from the reference code's AST when the item has one, else
from a conservative reading of the question (issue 19.6).

Requirements are classes of operation on columns, so that equivalent spellings are the same
requirement: a filter on ``salary`` (a boolean mask, ``query()``, ``loc[]``, ``isin``, ``between``,
a comparison summed), a grouping by ``department`` (``groupby``, ``pivot_table``, ``value_counts``,
``crosstab``), an aggregation (``mean``; ``sum`` or a count; ``max`` or a sort or ``idxmax``), a
ranking (``nlargest(3)`` or a descending sort and ``head(3)``), a sort, a join on a key
(``merge``, ``join``, a ``map`` lookup, ``isin`` of another table's column). Both sides are read by
:mod:`assay.scoring.pandas.code`, with the same lineage rules.

With reference code, the question is read only for what the reference cannot show: whether the
answer's row order matters ("sorted", "in alphabetical order", "descending"). Without reference
code (an item with only an expected result), the question's conservative reading
(:mod:`assay.scoring.pandas.question`) is all there is.

Coverage and understanding are then measured from the candidate's own code against these
requirements: a matching result alone grants neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from assay.scoring.pandas.code import EXTREME_CALLS, SORT_CALLS, CodeFacts
from assay.scoring.pandas.question import QuestionFacts, join_implied

# The statistical class each operation performs (the pandas code-generation design, 1.3), read from reference code.
STAT_OF_OPERATION: dict[str, tuple[str, ...]] = {
    "mean": ("mean",), "average": ("mean",), "sum": ("sum",), "count": ("count",), "size": ("count",),
    "len": ("count",), "shape": ("count",), "value_counts": ("count", "groupby"), "nunique": ("nunique",),
    "unique": ("nunique",), "drop_duplicates": ("nunique",), "max": ("max",), "idxmax": ("max",),
    "argmax": ("max",), "min": ("min",), "idxmin": ("min",), "argmin": ("min",), "median": ("median",),
    "quantile": ("median",), "std": ("std",), "var": ("std",), "groupby": ("groupby",),
    "pivot_table": ("groupby",), "pivot": ("groupby",), "crosstab": ("groupby",), "resample": ("groupby",),
}
# The operations of a candidate that carry out each class: equivalent spellings. A count is a sum of
# a boolean mask and a sum of ones; a share is a mean; sorting or ranking finds an extreme; grouping
# or a set finds the distinct values.
STAT_SATISFIERS: dict[str, set[str]] = {
    "mean": {"mean", "average", "divide"},
    "sum": {"sum", "cumsum", "count", "size", "len", "shape", "value_counts"},
    "max": {"max", "idxmax", "nlargest", "cummax", "argmax", "sort_values", "sort_index", "sorted", "rank", "value_counts"},
    "min": {"min", "idxmin", "nsmallest", "cummin", "argmin", "sort_values", "sort_index", "sorted", "rank", "value_counts"},
    "count": {"count", "size", "len", "shape", "value_counts", "nunique", "sum", "divide"},
    "median": {"median", "quantile"},
    "std": {"std", "var"},
    "nunique": {"nunique", "unique", "drop_duplicates", "value_counts", "set", "groupby", "categories"},
    "groupby": {"groupby", "pivot_table", "crosstab", "value_counts", "resample", "pivot"},
}
# A reference that does one of these orders its rows or picks an extreme: a sort requirement.
ORDERING_CALLS = {"sort_values", "sort_index", "sorted", "nlargest", "nsmallest", "rank", "idxmax", "idxmin", "argmax", "argmin"}


@dataclass
class Ranking:
    n: int | None
    descending: bool

    @property
    def label(self) -> str:
        return f"{'top' if self.descending else 'bottom'} {self.n if self.n is not None else 'N'}"


@dataclass
class Requirements:
    source: str  # "reference_code" or "question"
    columns: list[str] = field(default_factory=list)
    filter: bool = False
    filter_columns: list[str] = field(default_factory=list)
    groupby_columns: list[str] = field(default_factory=list)
    stats: list[str] = field(default_factory=list)
    rankings: list[Ranking] = field(default_factory=list)
    sort: bool = False
    join: bool = False
    join_keys: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        out = asdict(self)
        out["rankings"] = [r.label for r in self.rankings]
        return out


def from_reference(reference: CodeFacts) -> Requirements:
    stats = list(dict.fromkeys(s for op in sorted(reference.operations) for s in STAT_OF_OPERATION.get(op, ())))
    return Requirements(
        source="reference_code",
        columns=[c for c in reference.columns if c not in reference.count_only_columns],
        filter=reference.filters or reference.conditions > 0 or bool(reference.filter_columns),
        filter_columns=list(reference.filter_columns),
        groupby_columns=list(reference.groupby_columns),
        stats=stats,
        rankings=_rankings(reference),
        sort=bool(reference.sort_calls & ORDERING_CALLS),
        join=bool(reference.joins),
        join_keys=list(reference.join_keys),
    )


def _rankings(code: CodeFacts) -> list[Ranking]:
    """What the reference ranks: nlargest(n), a sort (or value_counts) then head(n) / [:n] / tail(n),
    idxmax."""
    found: list[Ranking] = []
    for kind, n in code.limits:
        if kind in ("nlargest", "nsmallest"):
            found.append(Ranking(n, kind == "nlargest"))
        elif code.sort_calls & {"sort_values", "sort_index", "sorted", "value_counts"} and len(code.sort_descending) == 1:
            (descending,) = code.sort_descending
            found.append(Ranking(n, descending if kind in ("head", "slice") else not descending))
    for call, descending in (("idxmax", True), ("argmax", True), ("idxmin", False), ("argmin", False)):
        if call in code.sort_calls and not found:
            found.append(Ranking(1, descending))
    unique: dict[tuple[int | None, bool], Ranking] = {(r.n, r.descending): r for r in found}
    return list(unique.values())


def from_question(question: QuestionFacts, frames: dict[str, list[str]]) -> Requirements:
    return Requirements(
        source="question",
        columns=list(question.mentioned_columns),
        filter=question.wants_filter,
        groupby_columns=list(question.groupby_columns),
        stats=list(question.stat_operations),
        rankings=[Ranking(n, True) for n in question.top_n] + [Ranking(n, False) for n in question.bottom_n],
        sort=question.wants_sort,
        join=question.wants_join or join_implied(question, frames),
        join_keys=list(question.join_keys),
    )


# --- the candidate against the requirements --------------------------------------------------------


def ranked(code: CodeFacts, n: int | None, descending: bool) -> float:
    """How well the code carries out "top / bottom N"."""
    direct = "nlargest" if descending else "nsmallest"
    if direct in code.sort_calls:
        ns = [x for kind, x in code.limits if kind == direct]
        return 1.0 if n is None or n in ns else 0.5
    sorts = code.sort_calls & {"sort_values", "sort_index", "sorted", "rank", "value_counts"}
    if sorts:
        if descending in code.sort_descending:
            ns = [x for kind, x in code.limits if kind in ("head", "slice")]
        elif (not descending) in code.sort_descending:
            ns = [x for kind, x in code.limits if kind == "tail"]
        else:
            return 0.5
        if ns and (n is None or n in ns):
            return 1.0
        return 0.5
    if n == 1 and ({"idxmax", "max", "argmax"} if descending else {"idxmin", "min", "argmin"}) & code.sort_calls:
        return 1.0
    return 0.0


def selects_rows(code: CodeFacts, on: list[str]) -> bool:
    """Rows are selected some way: a condition, a filter call, a (semi-)join, or a group's row
    picked by the columns the requirement selects ``on`` (``groupby('p')['h'].mean()['high']``)."""
    if code.filters or code.conditions > 0 or code.filter_columns or code.joins:
        return True
    return bool(on) and set(on) <= set(code.groupby_columns)


def selection_columns(code: CodeFacts) -> set[str]:
    """Columns rows are selected on: conditions, and the keys of groups and joins (selecting a
    group's row, or rows that have a match, selects on the key)."""
    return set(code.filter_columns) | set(code.groupby_columns) | set(code.join_keys)


def orders_rows(code: CodeFacts) -> bool:
    return bool(code.sort_calls & (SORT_CALLS | EXTREME_CALLS))
