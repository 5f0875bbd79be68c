"""The structure of a KQL query, read from a real grammar.

:func:`parse_query` is the one interface: query text in, :class:`QueryStructure` out, or
:class:`KqlParseError` with the parser's message. Underneath it walks the concrete syntax tree of
duckdb-kql's ANTLR grammar (Microsoft's ``Kql.g4``, vendored by duckdb-kql and pinned through its
version). Chosen over Microsoft's Kusto.Language because it is pure Python: scoring needs no Node
process. Nothing here reads structure with regular expressions; the only text handling is of single
tokens (a literal's spelling).

What is extracted (every pipeline counts, including ``let`` bodies, join / lookup sides, union
branches and subqueries; ``let`` names are not tables):

- ``tables``: names read as tabular sources;
- ``filters``: the conjuncts of every ``where`` predicate, normalised (below);
- ``aggregations``: aggregation expressions without their aliases (``summarize``, ``make-series``,
  and ``| count`` as ``count()``);
- ``group_by``: ``summarize ... by`` / ``make-series ... by`` keys without aliases, and the columns
  of ``distinct`` (which is ``summarize by``);
- ``sort_keys``, ``take``, ``projected_columns``, ``ordered``: from the main pipeline (the last
  query statement; a ``let`` it starts from contributes its own): the last ``sort``/``order``/
  ``top`` keys and direction (KQL's default is ``desc``), the last ``take``/``limit``/``top`` size,
  the expressions of the last ``project``, and whether the result's row order is fixed by a sort
  (a ``sort``/``order``/``top`` followed only by order-preserving operators such as ``take``,
  ``project``, ``extend``, ``where``);
- ``join_kinds``: each ``join``'s kind (default ``innerunique``; ``anti`` is ``leftanti``) and each
  ``lookup``'s as ``lookup <kind>`` (default ``leftouter``).

Normalisation, so that equivalent spellings compare equal:

- whitespace, comments and parentheses disappear with the tokens: expressions are re-rendered from
  the tree;
- quote style: string literals are decoded (``'x'``, ``"x"``, ``@"x"``, ``h"x"``, adjacent
  ``'a' 'b'``) and re-quoted one way;
- timespans are converted to ticks and written in the largest exact unit (d, h, m, s, ms, tick):
  ``ago(1d)`` ≡ ``ago(24h)`` ≡ ``ago(1440m)``; numbers by value (``1`` ≡ ``1.0`` ≡ ``long(1)``);
  datetimes in ISO form;
- ``x in (a, b)`` ≡ ``x == a or x == b`` (``!in`` → ``!=`` joined by ``and``, ``in~`` → ``=~``,
  ``!in~`` → ``!~``; ``between (a .. b)`` ≡ ``>= a and <= b``); the lists of ``has_any`` and other
  set-valued operators are sorted;
- operand order of the commutative operators ``==``, ``!=``, ``=~``, ``!~``, ``and``, ``or``, and
  of the mirrored comparisons (``a < b`` ≡ ``b > a``): a constant goes right, otherwise operands are
  sorted; ``and`` / ``or`` chains are flattened and de-duplicated;
- aliases: ``Count = count()`` ≡ ``count()``, and a later reference to an alias, to an ``extend``ed
  or renamed column, to Kusto's default aggregate names (``count_``, ``sum_x``) or to a scalar
  ``let`` stands for the expression it names, so ``summarize Count = count() | sort by Count`` ≡
  ``summarize count() | sort by count_``;
- keyword case: the grammar, like Kusto, accepts keywords in lower case only; function names, which
  it accepts in any case (``COUNT()``), are lower-cased.

duckdb-kql's grammar rejects ``count(*)``, which users write for ``count()``: :func:`rewrite_count_star`
drops the ``*`` at the token level (the lexer finds it, so comments and strings are never touched)
before parsing, and :mod:`assay.scoring.kql.execute` does the same before executing.

Parsing is cached per process on the query text (expected queries repeat across a batch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Literal

import duckdb_kql
from antlr4 import InputStream
from antlr4.tree.Tree import TerminalNode
from duckdb_kql._antlr.KqlLexer import KqlLexer
from duckdb_kql._antlr.KqlParser import KqlParser
from duckdb_kql.timespans import ticks

__all__ = ["KqlParseError", "QueryStructure", "SortKey", "parse_query", "rewrite_count_star"]


class KqlParseError(ValueError):
    """The text is not a KQL query the grammar accepts. ``message`` is the parser's own words."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class SortKey:
    key: str
    direction: Literal["asc", "desc"]

    def __str__(self) -> str:
        return f"{self.key} {self.direction}"


@dataclass(frozen=True)
class QueryStructure:
    """What a query does, as sets of normalised strings (see the module docstring)."""

    tables: frozenset[str]
    filters: frozenset[str]
    aggregations: frozenset[str]
    group_by: frozenset[str]
    sort_keys: tuple[SortKey, ...]
    take: int | None
    join_kinds: frozenset[str]
    projected_columns: frozenset[str]
    ordered: bool


def parse_query(text: str) -> QueryStructure:
    """Parse ``text`` once per process; raises :class:`KqlParseError` when it does not parse."""
    parsed = _parse_cached(text)
    if isinstance(parsed, KqlParseError):
        raise parsed
    return parsed


@lru_cache(maxsize=8192)
def _parse_cached(text: str) -> QueryStructure | KqlParseError:
    # The error is returned, not raised, so lru_cache keeps failures too: an unparsable generated
    # query repeated across a batch is parsed once like any other.
    try:
        result = duckdb_kql.parse(rewrite_count_star(text))
    except duckdb_kql.KqlSyntaxError as exc:
        return KqlParseError(str(exc))
    if result.tree is None:
        return KqlParseError("a control command (such as .show), not a query")
    try:
        return _Walker().structure(result.tree)
    except KqlParseError as exc:
        return exc
    except RecursionError:
        return KqlParseError("the query is nested too deeply to analyse")


def rewrite_count_star(text: str) -> str:
    """``count(*)`` → ``count()``, found by the lexer so strings and comments are left alone."""
    if "*" not in text:
        return text
    lexer = KqlLexer(InputStream(text))
    lexer.removeErrorListeners()
    tokens = [t for t in lexer.getAllTokens() if t.channel == 0]
    drop = [
        star
        for name, open_paren, star, close_paren in zip(tokens, tokens[1:], tokens[2:], tokens[3:])
        if name.text.lower() == "count"
        and (open_paren.text, star.text, close_paren.text) == ("(", "*", ")")
    ]
    for star in reversed(drop):
        text = text[: star.start] + text[star.stop + 1 :]
    return text


# --- canonical expressions ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Term:
    """A normalised expression: its canonical text plus what ordering and nesting need."""

    text: str
    constant: bool = False  # a literal, or a call on constants: goes right of a comparison
    compound: bool = False  # an operator expression: parenthesised when nested
    logical: str | None = None  # "and" / "or", so chains can be flattened
    parts: tuple[_Term, ...] = ()

    @property
    def nested(self) -> str:
        return f"({self.text})" if self.compound else self.text

    @property
    def order(self) -> tuple[bool, str]:
        return (self.constant, self.text)


def _binary(op: str, left: _Term, right: _Term, *, commutative: bool = False) -> _Term:
    if commutative and right.order < left.order:
        left, right = right, left
    return _Term(f"{left.nested} {op} {right.nested}", left.constant and right.constant, compound=True)


_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _comparison(op: str, left: _Term, right: _Term) -> _Term:
    if op in _MIRRORED and right.order < left.order:
        left, right, op = right, left, _MIRRORED[op]
    return _binary(op, left, right)


def _logical(op: str, terms: Iterable[_Term]) -> _Term:
    flat: dict[str, _Term] = {}
    for term in terms:
        for part in term.parts if term.logical == op else (term,):
            flat.setdefault(part.text, part)
    parts = tuple(flat[text] for text in sorted(flat))
    if len(parts) == 1:
        return parts[0]
    # Comparisons bind tighter than and/or, so only a nested chain needs parentheses.
    text = f" {op} ".join(p.nested if p.logical else p.text for p in parts)
    return _Term(text, all(p.constant for p in parts), compound=True, logical=op, parts=parts)


def _call(name: str, args: list[_Term]) -> _Term:
    # A call is constant when all its inputs are (ago(1h), datetime_add(...)); now() reads the
    # pinned clock. Aggregates such as count() take columns, so they are never constant.
    constant = (bool(args) and all(a.constant for a in args)) or name == "now"
    return _Term(f"{name}({', '.join(a.text for a in args)})", constant)


# --- literals ----------------------------------------------------------------------------------

_TICKS_PER_UNIT = (
    ("d", 864_000_000_000),
    ("h", 36_000_000_000),
    ("m", 600_000_000),
    ("s", 10_000_000),
    ("ms", 10_000),
)
_NUMBER_RULES = {"LongLiteralExpression", "IntLiteralExpression", "RealLiteralExpression", "DecimalLiteralExpression"}


def _unwrap(text: str) -> str:
    """``long(5)`` → ``5``, ``datetime("2020-01-01")`` → ``2020-01-01``; other text unchanged."""
    head, paren, inner = text.partition("(")
    if paren and head.isidentifier() and inner.endswith(")"):
        text = inner[:-1].strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


def _number_text(token: str) -> str:
    text = _unwrap(token)
    try:
        value = Decimal(int(text, 16)) if text.lower().startswith(("0x", "-0x")) else Decimal(text)
    except (InvalidOperation, ValueError):
        return text.lower()
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _timespan_text(token: str) -> str:
    try:
        count = ticks(token)
    except ValueError:
        return f"timespan({_unwrap(token)})"
    for unit, per in _TICKS_PER_UNIT:
        if count % per == 0:
            return f"{count // per}{unit}"
    return f"{count}tick"


def _datetime_text(token: str) -> str:
    text = _unwrap(token)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return f"datetime({text})"
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return f"datetime({moment.isoformat()})"


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _string_value(token: str) -> str:
    """Decode one string literal token: quotes, ``@`` verbatim, ``h`` obfuscated, escapes."""
    if token[:1] in "hH":
        token = token[1:]
    verbatim = token.startswith("@")
    if verbatim:
        token = token[1:]
    quote, body = token[0], token[1:-1]
    if verbatim:
        return body.replace(quote * 2, quote)
    out: list[str] = []
    chars = iter(body)
    for ch in chars:
        if ch == "\\":
            escaped = next(chars, "\\")
            out.append(_ESCAPES.get(escaped, escaped))
        else:
            out.append(ch)
    return "".join(out)


def _string_literal(node: Any) -> str:
    # Adjacent literals concatenate ('a' "b" is "ab"); each is one token child.
    return "".join(_string_value(child.getText()) for child in node.children)


def _literal(node: Any, rule: str) -> _Term:
    text = node.getText()
    if rule == "StringLiteralExpression":
        return _Term(json.dumps(_string_literal(node), ensure_ascii=False), constant=True)
    if rule in _NUMBER_RULES:
        return _Term(_number_text(text), constant=True)
    if rule == "TimeSpanLiteralExpression":
        return _Term(_timespan_text(text), constant=True)
    if rule == "DateTimeLiteralExpression":
        return _Term(_datetime_text(text), constant=True)
    if rule == "BooleanLiteralExpression":
        return _Term(_unwrap(text).lower(), constant=True)
    return _Term(text, constant=True)  # guid, dynamic, typeof: getText() is already whitespace-free


_LITERAL_RULES = _NUMBER_RULES | {
    "StringLiteralExpression",
    "TimeSpanLiteralExpression",
    "DateTimeLiteralExpression",
    "BooleanLiteralExpression",
    "GuidLiteralExpression",
    "DynamicLiteralExpression",
    "TypeLiteralExpression",
}
_SCALAR_LITERAL_RULES = _LITERAL_RULES - {"DynamicLiteralExpression"}


# --- tree helpers --------------------------------------------------------------------------------


# Rule names as the context classes spell them; read through the rule index because labelled
# alternatives (`in (...)` is a ListEqualityExpression) subclass their rule's context.
_RULE_NAMES = tuple(name[0].upper() + name[1:] for name in KqlParser.ruleNames)


def _rule(node: Any) -> str:
    return "" if isinstance(node, TerminalNode) else _RULE_NAMES[node.getRuleIndex()]


def _collapse(node: Any) -> Any:
    """Skip the grammar's single-child precedence chains (expression > ... > primaryExpression)."""
    while not isinstance(node, TerminalNode) and node.children and len(node.children) == 1:
        child = node.children[0]
        if isinstance(child, TerminalNode):
            break
        node = child
    return node


def _rules(node: Any, *names: str) -> list[Any]:
    return [c for c in node.children or () if _rule(c) in names]


_NAME_RULES = {
    "IdentifierName",
    "KeywordName",
    "ExtendedKeywordName",
    "EscapedName",
    "IdentifierOrKeywordName",
    "IdentifierOrExtendedKeywordName",
    "IdentifierOrKeywordOrEscapedName",
    "IdentifierOrExtendedKeywordOrEscapedName",
    "SimpleNameReference",
    "ParameterName",
}


def _name(node: Any) -> str | None:
    """The identifier a (collapsed) name node spells, with ``['x']`` decoded; else None."""
    node = _collapse(node)
    rule = _rule(node)
    if rule == "EscapedName":
        return _string_literal(_collapse(_rules(node, "StringLiteralExpression")[0]))
    if rule in _NAME_RULES:
        return node.getText()
    return None


def _has_pipes(node: Any) -> bool:
    return _rule(node) == "PipeExpression" and len(node.children) > 1


def _join_tokens(pieces: list[str]) -> str:
    out = ""
    for piece in pieces:
        if out and not out.endswith(("(", "[", ".")) and piece not in (")", "]", ",", ".", "(", "["):
            out += " "
        out += piece
    return out


def _split_named(node: Any) -> tuple[str | None, Any]:
    """``Alias = expr`` → (alias, expr node); ``expr`` → (None, expr node)."""
    if _rule(node) == "NamedExpression" and _rule(node.children[0]) == "NamedExpressionNameClause":
        return _name(node.children[0].children[0]), node.children[1]
    return None, node


_JOIN_KINDS = {"anti": "leftanti", "leftantisemi": "leftanti", "rightantisemi": "rightanti"}
_IN_OPERATORS = {"in": ("==", "or"), "!in": ("!=", "and"), "in~": ("=~", "or"), "!in~": ("!~", "and")}
_EQUALITY_OPERATORS = {"==", "!=", "=~", "!~"}
_ORDER_PRESERVING = {
    "WhereOperator",
    "TakeOperator",
    "ProjectOperator",
    "ProjectAwayOperator",
    "ProjectKeepOperator",
    "ProjectRenameOperator",
    "ProjectReorderOperator",
    "ExtendOperator",
    "SerializeOperator",
    "AsOperator",
    "RenderOperator",
}
_PATH_RULES = {"FunctionCallOrPathExpression", "WildcardedPathExpression"}
_TABULAR_RULES = _PATH_RULES | {"PipeExpression", "UnionOperator", "DataTableExpression"}
# Kusto names an unaliased `summarize ... by bin(ts, 1h)` key after the column it bins.
_BINNING_FUNCTIONS = {"bin", "floor", "bin_at"}


# --- the walk ------------------------------------------------------------------------------------


@dataclass
class _Pipeline:
    """What one pipeline has seen so far; only the main pipeline's order/size/projection is kept."""

    aliases: dict[str, _Term]
    sort_keys: tuple[SortKey, ...] = ()
    take: int | None = None
    projection: frozenset[str] = frozenset()
    ordered: bool = False


class _Walker:
    def __init__(self) -> None:
        self.tables: set[str] = set()
        self.let_names: set[str] = set()
        self.filters: set[str] = set()
        self.aggregations: set[str] = set()
        self.group_by: set[str] = set()
        self.join_kinds: set[str] = set()
        self.scalar_lets: dict[str, _Term] = {}
        self.tabular_lets: dict[str, _Pipeline] = {}

    def structure(self, tree: Any) -> QueryStructure:
        main: _Pipeline | None = None
        for statement in _rules(_rules(tree, "Query")[0], "Statement"):
            inner = statement.children[0]
            rule = _rule(inner)
            if rule == "LetStatement":
                self._let(inner.children[0])
            elif rule == "QueryStatement":
                main = self._pipeline_state()
                self._tabular(inner.children[0], main)
        if main is None:
            raise KqlParseError("the text has no query statement")
        return QueryStructure(
            tables=frozenset(self.tables - self.let_names),
            filters=frozenset(self.filters),
            aggregations=frozenset(self.aggregations),
            group_by=frozenset(self.group_by),
            sort_keys=main.sort_keys,
            take=main.take,
            join_kinds=frozenset(self.join_kinds),
            projected_columns=main.projection,
            ordered=main.ordered,
        )

    def _pipeline_state(self) -> _Pipeline:
        return _Pipeline(aliases=dict(self.scalar_lets))

    # statements

    def _let(self, declaration: Any) -> None:
        name = _name(declaration.children[1])
        if name is None:
            return
        self.let_names.add(name)
        if _rule(declaration) != "LetVariableDeclaration":
            # Functions, views and materialized lets: their bodies read tables like any query.
            self._scan_subqueries(declaration)
            return
        value = declaration.children[-1]
        if self._is_tabular(value):
            state = self._pipeline_state()
            self._tabular(value, state)
            self.tabular_lets[name] = state
        else:
            self.scalar_lets[name] = self._term(value, self.scalar_lets)

    def _is_tabular(self, node: Any) -> bool:
        node = _collapse(node)
        rule = _rule(node)
        if rule in _TABULAR_RULES:
            return True
        if rule == "ParenthesizedExpression":
            return self._is_tabular(node.children[1])
        if rule == "NamedFunctionCallExpression":
            return (_name(node.children[0]) or "").lower() == "materialize"
        name = _name(node)
        return name is not None and name not in self.scalar_lets

    # tabular expressions

    def _tabular(self, node: Any, state: _Pipeline | None = None) -> None:
        state = state or self._pipeline_state()
        node = _collapse(node)
        rule = _rule(node)
        if rule == "PipeExpression":
            self._tabular(node.children[0], state)
            for piped in node.children[1:]:
                self._operator(_collapse(piped.children[1]), state)
        elif rule == "ParenthesizedExpression":
            self._tabular(node.children[1], state)
        elif rule == "UnionOperator":
            self._union(node, state)
        elif rule == "NamedFunctionCallExpression" and (_name(node.children[0]) or "").lower() == "materialize":
            self._tabular(_rules(node, "ArgumentExpression")[0], state)
        elif rule in _PATH_RULES:
            # database("db").T / cluster("c").database("db").T: the table is the last segment.
            last = _collapse(node.children[-1])
            table = _name(last.children[-1]) if _rule(last) == "FunctionCallOrPathPathOperation" else None
            self.tables.add(table or last.getText())
        elif rule == "WildcardedName":
            self.tables.add(node.getText())  # `union Storm*`: the pattern stands for its tables
        elif (name := _name(node)) is not None:
            self._source_name(name, state)
        else:
            self._scan_subqueries(node)

    def _source_name(self, name: str, state: _Pipeline) -> None:
        if name in self.tabular_lets:
            inherited = self.tabular_lets[name]
            state.sort_keys, state.take = inherited.sort_keys, inherited.take
            state.projection, state.ordered = inherited.projection, inherited.ordered
            state.aliases.update(inherited.aliases)
        elif name not in self.let_names:
            self.tables.add(name)

    def _scan_subqueries(self, node: Any) -> None:
        """Find the pipelines nested anywhere under ``node`` (in-lists, toscalar, function bodies)."""
        for child in node.children or ():
            if isinstance(child, TerminalNode):
                continue
            if _has_pipes(child):
                self._tabular(child)
            else:
                self._scan_subqueries(child)

    def _union(self, node: Any, state: _Pipeline) -> None:
        for branch in _rules(node, "UnionOperatorExpression"):
            self._tabular(branch)
        state.ordered = False

    # operators

    def _operator(self, op: Any, state: _Pipeline) -> None:
        rule = _rule(op)
        handler = getattr(self, f"_op_{rule}", None)
        if handler is not None:
            handler(op, state)
        else:
            self._scan_subqueries(op)
        if rule in ("SortOperator", "TopOperator"):
            state.ordered = True
        elif rule not in _ORDER_PRESERVING:
            state.ordered = False

    def _op_WhereOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802 - named after the rule
        predicate = self._term(op.children[-1], state.aliases)
        self.filters.update(p.text for p in (predicate.parts if predicate.logical == "and" else (predicate,)))

    def _op_SummarizeOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self._aggregate(_rules(op, "NamedExpression", "UnnamedExpression"), state)
        for by in _rules(op, "SummarizeOperatorByClause"):
            self._group(_rules(by, "NamedExpression", "UnnamedExpression"), state)

    def _op_MakeSeriesOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        for aggregation in _rules(op, "MakeSeriesOperatorAggregation"):
            self._aggregate(_rules(aggregation, "NamedExpression", "UnnamedExpression"), state)
        for by in _rules(op, "MakeSeriesOperatorByClause"):
            self._group(_rules(by, "NamedExpression", "UnnamedExpression"), state)

    def _op_CountOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self.aggregations.add("count()")

    def _op_DistinctOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        for target in _rules(op, "DistinctOperatorColumnListTarget"):
            self._group(_rules(target, "NamedExpression", "UnnamedExpression"), state)
        if _rules(op, "DistinctOperatorStarTarget"):
            self.group_by.add("*")

    def _op_ExtendOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        for named in _rules(op, "NamedExpression", "UnnamedExpression"):
            alias, value = _split_named(named)
            term = self._term(value, state.aliases)
            if alias is not None:
                state.aliases[alias] = term

    _op_ProjectRenameOperator = _op_ExtendOperator

    def _op_ProjectOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        projected = []
        for named in _rules(op, "NamedExpression", "UnnamedExpression"):
            alias, value = _split_named(named)
            term = self._term(value, state.aliases)
            projected.append(term.text)
            if alias is not None:
                state.aliases[alias] = term
        state.projection = frozenset(projected)

    def _op_SortOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        state.sort_keys = tuple(self._sort_key(o, state) for o in _rules(op, "OrderedExpression"))

    def _op_TopOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self._op_SortOperator(op, state)
        self._limit(_rules(op, "NamedExpression", "UnnamedExpression")[0], state)

    def _op_TakeOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self._limit(op.children[-1], state)

    def _op_JoinOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self._join(op, default="innerunique", label="")

    def _op_LookupOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self._join(op, default="leftouter", label="lookup ")

    def _join(self, op: Any, *, default: str, label: str) -> None:
        kind = default
        for child in op.children:
            rule = _rule(child)
            if rule in ("RelaxedQueryOperatorParameter", "StrictQueryOperatorParameter"):
                if child.children[0].getText().lower() == "kind":
                    spelled = child.children[-1].getText().lower()
                    kind = _JOIN_KINDS.get(spelled, spelled)
            elif rule and rule not in ("JoinOperatorOnClause", "JoinOperatorWhereClause"):
                self._tabular(child)
        self.join_kinds.add(f"{label}{kind}")

    def _op_UnionOperator(self, op: Any, state: _Pipeline) -> None:  # noqa: N802
        self._union(op, state)

    def _aggregate(self, nodes: list[Any], state: _Pipeline) -> None:
        for named in nodes:
            alias, value = _split_named(named)
            term = self._term(value, state.aliases)
            self.aggregations.add(term.text)
            name = alias or _default_column(value, aggregate=True)
            if name is not None:
                state.aliases[name] = term

    def _group(self, nodes: list[Any], state: _Pipeline) -> None:
        for named in nodes:
            alias, value = _split_named(named)
            term = self._term(value, state.aliases)
            self.group_by.add(term.text)
            name = alias or _default_column(value, aggregate=False)
            if name is not None and name != term.text:
                state.aliases[name] = term

    def _sort_key(self, ordered: Any, state: _Pipeline) -> SortKey:
        key = self._term(ordered.children[0], state.aliases).text
        words = {t.getText() for ordering in _rules(ordered, "SortOrdering") for t in ordering.children or ()}
        # KQL sorts descending unless told otherwise.
        return SortKey(key, "asc" if "asc" in words else "desc")

    def _limit(self, node: Any, state: _Pipeline) -> None:
        text = self._term(node, state.aliases).text
        state.take = int(text) if text.lstrip("-").isdigit() else None

    # scalar expressions

    def _term(self, node: Any, aliases: dict[str, _Term]) -> _Term:
        node = _collapse(node)
        if isinstance(node, TerminalNode):
            return _Term(node.getText())
        rule = _rule(node)
        if rule in _LITERAL_RULES:
            return _literal(node, rule)
        if (name := _name(node)) is not None:
            return aliases.get(name) or _Term(name)
        handler = getattr(self, f"_term_{rule}", None)
        if handler is not None:
            return handler(node, aliases)
        if _has_pipes(node):
            self._tabular(node)
        return self._generic(node, aliases)

    def _generic(self, node: Any, aliases: dict[str, _Term]) -> _Term:
        pieces = [
            child.getText() if isinstance(child, TerminalNode) else self._term(child, aliases).nested
            for child in node.children or ()
        ]
        return _Term(_join_tokens(pieces))

    def _term_LogicalOrExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        return self._chain("or", node, aliases)

    def _term_LogicalAndExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        return self._chain("and", node, aliases)

    def _chain(self, op: str, node: Any, aliases: dict[str, _Term]) -> _Term:
        # first operand, then (op operand) operation nodes
        first, *operations = node.children
        return _logical(op, [self._term(first, aliases)] + [self._term(o.children[-1], aliases) for o in operations])

    def _term_RelationalExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        left, op, right = node.children
        return _comparison(op.getText(), self._term(left, aliases), self._term(right, aliases))

    def _term_EqualityExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        if len(node.children) != 2 or _rule(node.children[1]) != "EqualityExpressionTail":
            return self._generic(node, aliases)
        left = self._term(node.children[0], aliases)
        tail = node.children[1]
        op = tail.children[0].getText()
        operand_nodes = [c for c in tail.children[1:] if not isinstance(c, TerminalNode)]
        operands = [self._term(c, aliases) for c in operand_nodes]
        if op in _EQUALITY_OPERATORS and len(operands) == 1:
            return _binary(op, left, operands[0], commutative=True)
        if op in _IN_OPERATORS and self._expandable(operand_nodes):
            equals, joiner = _IN_OPERATORS[op]
            return _logical(joiner, [_binary(equals, left, o, commutative=True) for o in operands])
        if op in ("between", "!between") and len(operands) == 2:
            low, high = operands
            if op == "between":
                return _logical("and", [_comparison(">=", left, low), _comparison("<=", left, high)])
            return _logical("or", [_comparison("<", left, low), _comparison(">", left, high)])
        # has_any / has_all / an in over a subquery or a dynamic array: the list is a set.
        listed = ", ".join(sorted(o.text for o in operands))
        return _Term(f"{left.nested} {op} ({listed})", compound=True)

    @staticmethod
    def _expandable(operand_nodes: list[Any]) -> bool:
        # `x in (a, b)` is `x == a or x == b`; a lone name or subquery may be a table or a dynamic
        # array, where the rewrite would change the meaning.
        if len(operand_nodes) > 1:
            return not any(_rule(_collapse(n)) in ("PipeExpression", "DynamicLiteralExpression") for n in operand_nodes)
        return len(operand_nodes) == 1 and _rule(_collapse(operand_nodes[0])) in _SCALAR_LITERAL_RULES

    def _term_StringBinaryOperatorExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        first, *operations = node.children
        term = self._term(first, aliases)
        for operation in operations:
            op = " ".join(t.getText() for t in operation.children[0].children)
            # =~ and !~ are string operators in the grammar, and commutative like == and !=.
            term = _binary(op, term, self._term(operation.children[-1], aliases), commutative=op in _EQUALITY_OPERATORS)
        return term

    def _term_AdditiveExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        first, *operations = node.children
        term = self._term(first, aliases)
        for operation in operations:
            term = _binary(operation.children[0].getText(), term, self._term(operation.children[-1], aliases))
        return term

    _term_MultiplicativeExpression = _term_AdditiveExpression

    def _term_InvocationExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        sign, operand = node.children[0].getText(), self._term(node.children[-1], aliases)
        if operand.constant and not operand.compound and operand.text[:1].isdigit():
            return _Term(_number_text(sign + operand.text) if sign == "-" else operand.text, constant=True)
        return _Term(f"{sign}{operand.nested}", operand.constant)

    def _term_NamedFunctionCallExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        name = _name(node.children[0]) or node.children[0].getText()
        return _call(name.lower(), [self._term(a, aliases) for a in _rules(node, "ArgumentExpression")])

    def _term_CountExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        return _call("count", [])

    def _term_ParenthesizedExpression(self, node: Any, aliases: dict[str, _Term]) -> _Term:  # noqa: N802
        inner = _collapse(node.children[1])
        if _has_pipes(inner):
            self._tabular(inner)
            return _Term(f"({self._generic(inner, aliases).text})")
        return self._term(inner, aliases)


def _default_column(node: Any, *, aggregate: bool) -> str | None:
    """Kusto's name for an unaliased column: ``count_``, ``sum_x`` for aggregates, ``ts`` for
    ``bin(ts, 1h)`` as a group key; None when there is no such simple name."""
    node = _collapse(node)
    rule = _rule(node)
    if rule == "CountExpression":
        return "count_"
    if rule != "NamedFunctionCallExpression":
        return None
    function = (_name(node.children[0]) or "").lower()
    arguments = _rules(node, "ArgumentExpression")
    column = _name(arguments[0]) if arguments else None
    if aggregate:
        return f"{function}_{column or ''}"
    return column if function in _BINNING_FUNCTIONS else None
