"""Every valid answer of an expected query whose output is not uniquely determined.

Kusto leaves some outputs open, and so does the offline engine: ``top N by x`` and ``sort by x |
take N`` with ties at the boundary, ``take N`` without a sort, the order of rows with tied sort
keys, and the default join kind (``innerunique`` keeps an arbitrary row per left key). The expected
run returns one valid answer among several; a generated query that picks another valid one is not
wrong, and comparing with the expected run alone would fail it on some runs and pass it on others.

So, when the expected query's main pipeline ends in one of these constructs (followed only by
``project``-family or ``extend`` operators, which keep the row count), its valid answers are
described as *groups*: each group is a pool of candidate rows and the number a valid answer takes
from it (its quota). A valid answer takes exactly the quota of each group, any of its rows:

- ``top N by k`` / ``sort by k | take N``: a group per value of the sort key(s), in sort order, from
  the query run without its limit (and with the keys kept in extra ``__assay_tie*`` columns through
  the operators after it). The first N rows fix the quotas: groups strictly above the boundary
  are taken whole, the boundary group gives the rest, any of its rows. The rows are in that order.
- ``sort by k`` without a limit: the same groups, each taken whole; only the order of rows inside a
  group is open.
- ``take N`` without a sort: one group, the rows without the ``take``, quota N.
- a join of the default kind: a group per left key (the key value kept in an extra column), the
  pool from the same query with ``kind=inner`` (every left row with that key), the quota the number
  of rows the expected run has for that key. (This accepts rows of different left rows for one
  key, a little more than Kusto would return.)
- ``summarize arg_max(x, ...) by k`` (or ``arg_min``; the only aggregate, over plain columns): a
  group per ``k``, the pool every row whose ``x`` equals the group's maximum (minimum), quota 1.

Nothing else is analysed: an open choice elsewhere (``take_any``, a ``take`` inside a subquery, an
``arg_max`` beside other aggregates) is compared as the expected run returned it. The offline engine reads every table in one
canonical row order (:mod:`assay.scoring.kql.offline`), so such a case is at least the same on
every run.

:func:`plan` builds the queries from the parse tree (text spans of the main pipeline's operators);
:func:`answers` runs them; :func:`assay.scoring.kql.results.best_answer` picks, among the valid
answers, the one closest to the generated rows, and that is what is compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import duckdb_kql
from antlr4.tree.Tree import TerminalNode

from assay.scoring.kql.parser import _collapse, _rule, _rules, _split_named, rewrite_count_star

__all__ = ["TIE_PREFIX", "Answers", "TiePlan", "answers", "plan"]

Row = dict[str, Any]
TIE_PREFIX = "__assay_tie"
Construct = Literal["top", "sort then take", "take", "sort", "default join", "arg_max", "arg_min"]

# Operators after the construct that keep every row (so the groups' quotas still hold).
_ROW_KEEPING = {
    "ProjectOperator",
    "ProjectAwayOperator",
    "ProjectKeepOperator",
    "ProjectRenameOperator",
    "ProjectReorderOperator",
    "ExtendOperator",
}
# Between a sort and its take: operators that keep the sort order.
_ORDER_KEEPING = _ROW_KEEPING | {"WhereOperator", "SerializeOperator"}
# Operators whose column list must carry the tie columns through.
_COLUMN_LISTS = {"ProjectOperator", "ProjectKeepOperator"}


@dataclass(frozen=True)
class TiePlan:
    """How to find every valid answer of one expected query."""

    construct: Construct
    pool_query: str  # the candidate rows, with the tie columns
    width: int  # how many tie columns the pool rows carry
    limit: int | None = None  # top / take size
    grouped_query: str | None = None  # default join: the expected query with its tie columns (quotas)

    @property
    def ordered(self) -> bool:
        return self.construct in ("top", "sort then take", "sort")


@dataclass(frozen=True)
class Answers:
    """The valid answers: per group, its candidate rows (tie columns removed) and how many a valid
    answer takes; groups in row order when ``ordered``."""

    construct: Construct
    groups: tuple[tuple[tuple[Row, ...], int], ...]
    ordered: bool

    @property
    def open(self) -> bool:
        """Whether more than one answer is valid (some group offers more rows than it takes), or
        the order inside a group is open."""
        return any(len(pool) > quota or (self.ordered and quota > 1) for pool, quota in self.groups)


@dataclass(frozen=True)
class _Op:
    rule: str
    start: int
    stop: int  # inclusive
    node: Any


def plan(expected_kql: str) -> TiePlan | None:
    """The tie plan of an expected query, or None when its output is taken as it comes (no open
    construct ends its main pipeline, or the query does not parse)."""
    return _plan_cached(expected_kql)


@lru_cache(maxsize=4096)
def _plan_cached(expected_kql: str) -> TiePlan | None:
    text = rewrite_count_star(expected_kql)
    try:
        tree = duckdb_kql.parse(text).tree
    except duckdb_kql.KqlSyntaxError:
        return None
    if tree is None:
        return None
    main_start, ops = _main_operators(tree)
    if not ops:
        return None
    last = len(ops)
    while last > 0 and ops[last - 1].rule in _ROW_KEEPING:
        last -= 1
    if last == 0:
        return None
    construct_op = ops[last - 1]
    tail = ops[last:]
    if construct_op.rule == "TopOperator":
        limit = _integer(_rules(construct_op.node, "NamedExpression", "UnnamedExpression")[0])
        keys = _rules(construct_op.node, "OrderedExpression")
        if limit is None or not keys:
            return None
        return TiePlan("top", _sorted_pool(text, construct_op, keys, [], tail), len(keys), limit)
    if construct_op.rule == "TakeOperator":
        limit = _integer(construct_op.node.children[-1])
        if limit is None:
            return None
        between = last - 1
        while between > 0 and ops[between - 1].rule in _ORDER_KEEPING:
            between -= 1
        if between > 0 and ops[between - 1].rule == "SortOperator":
            sort = ops[between - 1]
            keys = _rules(sort.node, "OrderedExpression")
            pool = _sorted_pool(text, sort, keys, ops[between : last - 1], tail)
            return TiePlan("sort then take", pool, len(keys), limit)
        pool = text[: construct_op.start].rstrip().removesuffix("|").rstrip() + _rest(text, tail, 0)
        return TiePlan("take", pool, 0, limit)
    if construct_op.rule == "SortOperator":
        keys = _rules(construct_op.node, "OrderedExpression")
        return TiePlan("sort", _sorted_pool(text, construct_op, keys, [], tail), len(keys))
    if construct_op.rule == "JoinOperator":
        return _join_plan(text, construct_op, tail)
    if construct_op.rule == "SummarizeOperator":
        return _arg_plan(text, main_start, construct_op, tail)
    return None


def _main_operators(tree: Any) -> tuple[int, list[_Op]]:
    """Where the main pipeline (the last query statement) starts, and its operators."""
    statements = _rules(_rules(tree, "Query")[0], "Statement")
    queries = [s.children[0] for s in statements if _rule(s.children[0]) == "QueryStatement"]
    if not queries:
        return 0, []
    node = _collapse(queries[-1].children[0])
    if _rule(node) != "PipeExpression":
        return 0, []
    ops = []
    for piped in node.children[1:]:
        op = _collapse(piped.children[1])
        ops.append(_Op(_rule(op), op.start.start, op.stop.stop, op))
    return node.start.start, ops


def _integer(node: Any) -> int | None:
    spelled = _collapse(node).getText()
    return int(spelled) if spelled.isdigit() else None


def _span(text: str, node: Any) -> str:
    return text[node.start.start : node.stop.stop + 1]


def _tie_columns(width: int) -> str:
    return ", ".join(f"{TIE_PREFIX}{i}" for i in range(width))


def _rest(text: str, ops: Sequence[_Op], width: int) -> str:
    """``ops`` re-spelled, each ``project`` / ``project-keep`` also keeping the tie columns."""
    out = ""
    for op in ops:
        spelled = text[op.start : op.stop + 1]
        if width and op.rule in _COLUMN_LISTS:
            spelled += f", {_tie_columns(width)}"
        out += f" | {spelled}"
    return out


def _sorted_pool(text: str, sort: _Op, keys: list[Any], between: Sequence[_Op], tail: Sequence[_Op]) -> str:
    """The query up to ``sort``, the sort keys copied into tie columns and sorted on them the same
    way, then the operators between the sort and its limit and after it, without the limit."""
    prefix = text[: sort.start].rstrip().removesuffix("|").rstrip()
    extend = ", ".join(f"{TIE_PREFIX}{i} = {_span(text, key.children[0])}" for i, key in enumerate(keys))
    orderings = []
    for i, key in enumerate(keys):
        ordering = " ".join(_span(text, o) for o in _rules(key, "SortOrdering"))
        orderings.append(f"{TIE_PREFIX}{i} {ordering}".rstrip())
    return f"{prefix} | extend {extend} | sort by {', '.join(orderings)}{_rest(text, between, len(keys))}{_rest(text, tail, len(keys))}"


def _join_plan(text: str, join: _Op, tail: Sequence[_Op]) -> TiePlan | None:
    children = join.node.children
    if any(
        _rule(c) in ("RelaxedQueryOperatorParameter", "StrictQueryOperatorParameter")
        and c.children[0].getText().lower() == "kind"
        for c in children
    ):
        return None  # an explicit kind (innerunique spelled out is the generated side's business)
    clauses = [c for c in children if _rule(c) == "JoinOperatorOnClause"]
    if not clauses:
        return None
    left_keys = []
    for condition in _rules(clauses[0], "UnnamedExpression", "NamedExpression"):
        key = _left_key(_collapse(condition))
        if key is None:
            return None
        left_keys.append(key)
    if not left_keys:
        return None
    up_to_join = text[: join.stop + 1]
    extend = " | extend " + ", ".join(f"{TIE_PREFIX}{i} = {k}" for i, k in enumerate(left_keys))
    rest = _rest(text, tail, len(left_keys))
    keyword = children[0]
    assert isinstance(keyword, TerminalNode)
    at = keyword.symbol.stop + 1
    inner = text[:at] + " kind=inner" + text[at : join.stop + 1]
    return TiePlan("default join", inner + extend + rest, len(left_keys), grouped_query=up_to_join + extend + rest)


def _left_key(condition: Any) -> str | None:
    """The left side's column of one ``on`` condition: ``Key`` or ``$left.A == $right.B``."""
    rule = _rule(condition)
    if rule in ("IdentifierName", "IdentifierOrKeywordOrEscapedName", "SimpleNameReference"):
        return condition.getText()
    if rule == "EqualityExpression":
        for side in (condition.children[0], condition.children[1].children[1]):
            side = _collapse(side)
            spelled = side.getText()
            if spelled.startswith("$left."):
                return spelled.removeprefix("$left.")
    return None


_NAME_RULES = {"IdentifierName", "IdentifierOrKeywordOrEscapedName", "SimpleNameReference", "NameReferenceWithDataScope"}


def _column(node: Any) -> str | None:
    """The column a plain name reference spells (``x``), else None."""
    node = _collapse(node)
    return node.getText() if _rule(node) in _NAME_RULES else None


def _arg_plan(text: str, main_start: int, summarize: _Op, tail: Sequence[_Op]) -> TiePlan | None:
    aggregates = _rules(summarize.node, "NamedExpression", "UnnamedExpression")
    by_clauses = _rules(summarize.node, "SummarizeOperatorByClause")
    if len(aggregates) != 1 or len(by_clauses) != 1:
        return None
    alias, value = _split_named(aggregates[0])
    if alias is not None:
        return None
    call = _collapse(value)
    if _rule(call) != "NamedFunctionCallExpression":
        return None
    function = call.children[0].getText().lower()
    if function not in ("arg_max", "arg_min"):
        return None
    arguments = [_collapse(a) for a in _rules(call, "ArgumentExpression")]
    if not arguments:
        return None
    measure = _column(arguments[0])
    columns = ["*" if a.getText() == "*" else _column(a) for a in arguments[1:]]
    keys = [_column(k) if _split_named(k)[0] is None else None for k in _rules(by_clauses[0], "NamedExpression", "UnnamedExpression")]
    if measure is None or None in columns or None in keys or not keys:
        return None
    lets = text[:main_start]
    prefix = text[main_start : summarize.start].rstrip().removesuffix("|").rstrip()
    best = "max" if function == "arg_max" else "min"
    by = ", ".join(f"{TIE_PREFIX}{i} = {k}" for i, k in enumerate(keys))
    on = ", ".join(f"$left.{k} == $right.{TIE_PREFIX}{i}" for i, k in enumerate(keys))
    ties = _tie_columns(len(keys))
    if "*" in columns:
        shape = f"project-away {TIE_PREFIX}_best"
    else:
        shape = "project " + ", ".join(dict.fromkeys([*keys, measure, *columns])) + f", {ties}"
    pool = (
        f"{lets}{prefix} | join kind=inner ({prefix} | summarize {TIE_PREFIX}_best = {best}({measure}) by {by})"
        f" on {on} | where {measure} == {TIE_PREFIX}_best | {shape}{_rest(text, tail, len(keys))}"
    )
    return TiePlan(function, pool, len(keys))  # type: ignore[arg-type]


Runner = Callable[[str], Any]  # query -> offline.Outcome


def answers(tie_plan: TiePlan, run: Runner) -> Answers | str:
    """The valid answers, running the plan's queries with ``run``; or why they cannot be known (a
    query of the plan did not run, or its result was cut short)."""
    from assay.scoring.kql.results import value_key

    pool = run(tie_plan.pool_query)
    if pool.status != "ok" or pool.truncated:
        return f"the {tie_plan.construct}'s candidate rows could not be listed offline: {pool.message or 'too many rows'}"
    ties = [f"{TIE_PREFIX}{i}" for i in range(tie_plan.width)]
    grouped: dict[tuple[Any, ...], list[Row]] = {}
    for row in pool.rows:
        key = tuple(value_key(row.get(t)) for t in ties)
        grouped.setdefault(key, []).append({k: v for k, v in row.items() if not k.startswith(TIE_PREFIX)})
    if tie_plan.construct == "default join":
        assert tie_plan.grouped_query is not None
        taken = run(tie_plan.grouped_query)
        if taken.status != "ok" or taken.truncated:
            return f"the default join's rows per key could not be counted offline: {taken.message or 'too many rows'}"
        quotas: dict[tuple[Any, ...], int] = {}
        for row in taken.rows:
            key = tuple(value_key(row.get(t)) for t in ties)
            quotas[key] = quotas.get(key, 0) + 1
        if set(quotas) - set(grouped):
            return "the default join's rows and its candidate rows disagree on the join keys"
        # No order: groups in a canonical order so that a comparison reads them the same every run.
        order = sorted(grouped, key=repr)
        return Answers(tie_plan.construct, tuple((tuple(grouped[k]), quotas.get(k, 0)) for k in order), False)
    if tie_plan.construct in ("arg_max", "arg_min"):  # one row per group, any that attains the extreme
        order = sorted(grouped, key=repr)
        return Answers(tie_plan.construct, tuple((tuple(grouped[k]), 1) for k in order), False)
    if tie_plan.limit is None:  # a sort: every row, in its key's place
        return Answers(tie_plan.construct, tuple((tuple(rows), len(rows)) for rows in grouped.values()), True)
    left = tie_plan.limit
    groups = []
    for rows in grouped.values():  # in the pool's sort order (one group when there is no sort)
        quota = min(left, len(rows))
        groups.append((tuple(rows), quota))
        left -= quota
    return Answers(tie_plan.construct, tuple(groups), tie_plan.ordered)
