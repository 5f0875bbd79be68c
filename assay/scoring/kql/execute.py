"""Run KQL offline on small in-memory tables with duckdb-kql, against a pinned clock.

Two failures are kept apart because they mean different things for a score:

- :class:`KqlExecutionError`: the query itself is wrong — it does not parse, or names a table or
  column that does not exist. For a generated query that is "did not execute".
- :class:`KqlUnsupported`: the query may be fine but the offline engine cannot run it (duckdb-kql's
  ``KqlUnsupportedError``, or DuckDB failing on the SQL it was given). Nothing may be concluded
  about the query from that.

A datetime literal that the offline engine cannot read becomes null there, silently (Kusto reads
``datetime(2024-03-06 10:00 PM)``; duckdb-kql does not), and a query comparing with null returns
nothing: two queries would agree about nothing. So each datetime literal of a query is evaluated on
its own first (once per process); one that evaluates to null, other than ``datetime(null)``, makes
the query :class:`KqlUnsupported`.

``now()`` / ``ago()`` read the ``now`` passed in, never the wall clock, so a rerun agrees. The
database has no access to files or the network (``enable_external_access`` is off) and the query
cannot write.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import duckdb
import duckdb_kql
from antlr4 import InputStream
from duckdb_kql._antlr.KqlLexer import KqlLexer

from assay.scoring.kql.parser import rewrite_count_star

__all__ = ["KqlExecutionError", "KqlUnsupported", "OfflineTables", "execute_kql", "load_rows", "run_on"]

Row = dict[str, Any]


class KqlExecutionError(Exception):
    """The query is wrong: a syntax error, an unknown table or column."""


class KqlUnsupported(Exception):
    """The offline engine cannot run this query; says nothing about whether the query is right."""


# DuckDB errors that point at the query (unknown names, a comparison of incompatible types);
# every other DuckDB error is taken as a gap in the translation.
_QUERY_ERRORS = (duckdb.BinderException, duckdb.CatalogException, duckdb.TypeMismatchException)


def execute_kql(query: str, tables: Mapping[str, Sequence[Row]], now: datetime) -> tuple[list[str], list[Row]]:
    """Run ``query`` on ``tables`` (name → rows as dicts) with ``now()`` pinned to ``now``.

    Returns the result's column names and its rows as dicts keyed by column name.
    """
    with OfflineTables(tables) as database:
        return database.run(query, now)


class OfflineTables:
    """An in-memory DuckDB database holding ``tables``; load once, run several queries on it."""

    def __init__(self, tables: Mapping[str, Sequence[Row]]) -> None:
        self._con = duckdb_kql.connect(
            ":memory:",
            config={"autoinstall_known_extensions": False, "autoload_known_extensions": False},
        )
        try:
            for name, rows in tables.items():
                load_rows(self._con, name, rows)
            # Set after loading: from here on, neither a query nor DuckDB may touch files or URLs.
            self._con.execute("SET enable_external_access = false")
        except BaseException:
            self._con.close()
            raise

    def __enter__(self) -> OfflineTables:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    def run(self, query: str, now: datetime) -> tuple[list[str], list[Row]]:
        columns, rows, _ = run_on(self._con, query, now)
        return columns, rows


def run_on(
    con: duckdb.DuckDBPyConnection,
    query: str,
    now: datetime,
    *,
    max_rows: int | None = None,
    fetch: bool = True,
) -> tuple[list[str], list[Row], bool]:
    """Run ``query`` on ``con`` with ``now()`` pinned: (columns, rows as dicts, truncated).

    ``max_rows`` keeps at most that many rows (``truncated`` says whether there were more);
    ``fetch=False`` only translates and binds the query (which is where syntax errors and unknown
    tables or columns show) and returns its columns without running it.
    """
    try:
        unreadable = [literal for literal in _datetime_literals(query) if not _readable(con, literal)]
        if unreadable:
            raise KqlUnsupported(
                f"the offline engine reads the datetime literal {unreadable[0]} as null (Kusto may read it)"
            )
        relation = duckdb_kql.kql(con, rewrite_count_star(query), allow_write=False, query_now=_utc(now))
        columns = list(relation.columns)
        dynamic = [str(t) == "JSON" for t in relation.types]
        if not fetch:
            return columns, [], False
        rows = (relation if max_rows is None else relation.limit(max_rows + 1)).fetchall()
    except duckdb_kql.KqlUnsupportedError as exc:
        raise KqlUnsupported(str(exc)) from exc
    except (duckdb_kql.KqlError, *_QUERY_ERRORS) as exc:
        raise KqlExecutionError(str(exc)) from exc
    except duckdb.Error as exc:
        raise KqlUnsupported(f"the offline engine failed on this query: {exc}") from exc
    truncated = max_rows is not None and len(rows) > max_rows
    if truncated:
        rows = rows[:max_rows]
    # DuckDB hands JSON back as text; a dynamic value is returned as the value it holds.
    return (
        columns,
        [
            {c: json.loads(v) if is_json and v is not None else v for c, v, is_json in zip(columns, row, dynamic)}
            for row in rows
        ],
        truncated,
    )


def _datetime_literals(query: str) -> list[str]:
    """The query's datetime literals, as spelled (strings and comments aside; ``datetime(null)`` is
    a null on purpose)."""
    if "datetime" not in query.lower():
        return []
    lexer = KqlLexer(InputStream(query))
    lexer.removeErrorListeners()
    spelled = (t.text for t in lexer.getAllTokens() if t.type == KqlLexer.DATETIMELITERAL)
    return list(dict.fromkeys(t for t in spelled if "".join(t.lower().split()) != "datetime(null)"))


_readable_literals: dict[str, bool] = {}
_readable_lock = threading.Lock()


def _readable(con: duckdb.DuckDBPyConnection, literal: str) -> bool:
    """Whether the offline engine reads ``literal`` as a value (cached per process)."""
    with _readable_lock:
        known = _readable_literals.get(literal)
    if known is None:
        try:
            rows = duckdb_kql.kql(con, f"print v = {literal}").fetchall()
        except (duckdb_kql.KqlError, duckdb.Error):
            return True  # not a read we can make: the query's own run says what it is
        known = bool(rows) and rows[0][0] is not None
        with _readable_lock:
            _readable_literals[literal] = known
    return known


def _utc(moment: datetime) -> datetime:
    """KQL datetimes are UTC; a naive ``now`` is taken to be UTC already."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def load_rows(con: duckdb.DuckDBPyConnection, name: str, rows: Sequence[Row]) -> None:
    """Create table ``name`` from dict rows, one typed list per column (no per-row inserts)."""
    if not rows:
        raise ValueError(f"table {name!r} has no rows, so its columns are unknown")
    columns = list(dict.fromkeys(key for row in rows for key in row))
    selects, params = [], []
    for column in columns:
        values = [row.get(column) for row in rows]
        sql_type, converted = _column(name, column, values)
        cast = "::JSON" if sql_type == "JSON" else ""
        storage = "VARCHAR" if sql_type == "JSON" else sql_type
        selects.append(f"UNNEST(?::{storage}[]){cast} AS {_quote(column)}")
        params.append(converted)
    con.execute(f"CREATE TABLE {_quote(name)} AS SELECT {', '.join(selects)}", params)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


_PYTHON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "BOOLEAN"),  # before int: bool is an int subclass
    (int, "BIGINT"),
    ((float, Decimal), "DOUBLE"),
    (str, "VARCHAR"),
    ((datetime, date), "TIMESTAMP"),
    (time, "TIME"),
    (timedelta, "INTERVAL"),
    ((dict, list), "JSON"),
)


def _column(table: str, column: str, values: list[Any]) -> tuple[str, list[Any]]:
    """The DuckDB type of one column's values, and the values converted for it."""
    kinds = {_sql_type(v) for v in values if v is not None}
    if kinds == {"BIGINT", "DOUBLE"}:
        kinds = {"DOUBLE"}  # a real column may hold whole numbers
    if len(kinds) > 1:
        raise ValueError(f"column {table}.{column} mixes value types: {', '.join(sorted(kinds))}")
    sql_type = kinds.pop() if kinds else "VARCHAR"
    if sql_type == "TIMESTAMP":
        values = [None if v is None else _utc(_as_datetime(v)) for v in values]
    elif sql_type == "JSON":
        values = [None if v is None else json.dumps(v) for v in values]
    elif sql_type == "DOUBLE":
        values = [None if v is None else float(v) for v in values]
    return sql_type, values


def _as_datetime(value: date) -> datetime:
    return value if isinstance(value, datetime) else datetime.combine(value, time())


def _sql_type(value: Any) -> str:
    for python_type, sql_type in _PYTHON_TYPES:
        if isinstance(value, python_type):
            return sql_type
    raise ValueError(f"cannot load a value of type {type(value).__name__} into a table")
