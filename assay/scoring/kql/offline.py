"""Both queries of a dataset-backed item, run offline on the dataset's tables, cached per process.

An item that names a dataset (by content hash, once ingest has resolved it) has its generated and
expected queries executed here, with duckdb-kql on DuckDB (:mod:`assay.scoring.kql.execute`), and
``now()`` / ``ago()`` pinned to the item's ``now`` or the score's creation time, never the wall clock.

Caching, per process (a Celery worker's threads share it):

- a dataset's tables are loaded once per content hash into one in-memory DuckDB database (the
  :data:`MAX_DATABASES` most recently used are kept), each table in one canonical row order
  (:func:`canonical_order`); external access is switched off after loading, and every query runs
  on its own cursor, so threads run queries side by side;
- each distinct (query, dataset, now) runs once: schema match, results match and the pass rule
  share it, and so do items that repeat an expected query. Concurrent asks for the same key wait
  for the first one (single flight). ``now`` is part of the key only when the query reads the clock
  (a ``now`` or ``ago`` token, found by the lexer), so a query without them is shared by every
  item, whatever its pinned now;
- a result keeps at most :data:`MAX_RESULT_ROWS` rows (``truncated`` says there were more); the
  result cache holds at most :data:`MAX_CACHED_ROWS` rows in all, least recently used out first;
- whether a query executes on a dataset does not depend on ``now`` (syntax, unknown tables and
  columns are found when DuckDB binds it), so the verdict is kept per (query, dataset):
  :func:`check` answers from it, or binds the query without running it.

Three outcomes, as :mod:`~assay.scoring.kql.execute` separates them: ``ok``, ``error`` (the query is
wrong: it does not parse or names what the dataset lacks) and ``unsupported`` (a gap in the engine,
which says nothing about the query).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

import duckdb
import duckdb_kql
from antlr4 import InputStream
from duckdb_kql._antlr.KqlLexer import KqlLexer

from assay.scoring.kql.execute import KqlExecutionError, KqlUnsupported, load_rows, run_on

__all__ = [
    "MAX_CACHED_ROWS",
    "MAX_DATABASES",
    "MAX_RESULT_ROWS",
    "Loader",
    "Outcome",
    "check",
    "clear",
    "execute",
    "stats",
    "store_loader",
    "uses_clock",
]

Row = dict[str, Any]
# Content hash -> table name -> a datasets.Table (CSV / Parquet / JSON bytes) or rows as dicts.
Loader = Callable[[str], Mapping[str, Any]]
Status = Literal["ok", "error", "unsupported"]

MAX_DATABASES = 8
MAX_RESULT_ROWS = 50_000
MAX_CACHED_ROWS = 500_000
MAX_MESSAGE_CHARS = 500
_MAX_VERDICTS = 16_384
_BIND_NOW = datetime(2000, 1, 1)  # binding does not read the clock; any instant will do


@dataclass(frozen=True)
class Outcome:
    """One query's run on one dataset. ``rows`` is shared by every caller: never mutate it."""

    status: Status
    columns: tuple[str, ...] = ()
    rows: tuple[Row, ...] = ()
    message: str | None = None
    truncated: bool = False
    seconds: float = 0.0


def store_loader(content_hash: str) -> dict[str, Any]:
    """A registered dataset's tables, read from the store (and cached there per process)."""
    from assay.scoring.intake.datasets import load_tables
    from assay.scoring.store.db import transaction

    with transaction() as session:
        return load_tables(session, content_hash)


@lru_cache(maxsize=16_384)
def uses_clock(query: str) -> bool:
    """Whether the query can read the clock: a ``now`` or ``ago`` token (strings and comments aside)."""
    if "now" not in query.lower() and "ago" not in query.lower():
        return False
    lexer = KqlLexer(InputStream(query))
    lexer.removeErrorListeners()
    return any(t.text.lower() in ("now", "ago") for t in lexer.getAllTokens() if t.channel == 0)


class _Engine:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._databases: OrderedDict[str, duckdb.DuckDBPyConnection] = OrderedDict()
        self._results: OrderedDict[tuple[str, str, datetime | None], Outcome] = OrderedDict()
        self._cached_rows = 0
        self._verdicts: OrderedDict[tuple[str, str], Outcome] = OrderedDict()
        self._flights: dict[Any, threading.Lock] = {}
        self.counters = {"datasets_loaded": 0, "executions": 0, "binds": 0, "result_hits": 0}

    # -- single flight ------------------------------------------------------------------------------

    def _flight(self, key: Any) -> threading.Lock:
        with self._lock:
            return self._flights.setdefault(key, threading.Lock())

    def _land(self, key: Any) -> None:
        with self._lock:
            self._flights.pop(key, None)

    # -- databases -----------------------------------------------------------------------------------

    def database(self, dataset: str, loader: Loader) -> duckdb.DuckDBPyConnection:
        with self._lock:
            con = self._databases.get(dataset)
            if con is not None:
                self._databases.move_to_end(dataset)
                return con
        key = ("database", dataset)
        with self._flight(key):
            try:
                with self._lock:
                    con = self._databases.get(dataset)
                if con is None:
                    con = _load_database(loader(dataset))
                    with self._lock:
                        self.counters["datasets_loaded"] += 1
                        self._databases[dataset] = con
                        while len(self._databases) > MAX_DATABASES:
                            # Dropped, not closed: a thread may still be running a cursor on it.
                            self._databases.popitem(last=False)
            finally:
                self._land(key)
            return con

    # -- results -------------------------------------------------------------------------------------

    def execute(self, query: str, dataset: str, now: datetime, loader: Loader) -> Outcome:
        key = (query, dataset, now if uses_clock(query) else None)
        hit = self._cached(key)
        if hit is not None:
            return hit
        with self._flight(key):
            try:
                hit = self._cached(key)
                if hit is not None:
                    return hit
                outcome = _run(self.database(dataset, loader), query, now, fetch=True)
                with self._lock:
                    self.counters["executions"] += 1
                    self._remember_verdict((query, dataset), outcome, authoritative=True)
                    if len(outcome.rows) <= MAX_CACHED_ROWS:
                        self._results[key] = outcome
                        self._cached_rows += len(outcome.rows)
                        while self._cached_rows > MAX_CACHED_ROWS or len(self._results) > _MAX_VERDICTS:
                            _, old = self._results.popitem(last=False)
                            self._cached_rows -= len(old.rows)
                return outcome
            finally:
                self._land(key)

    def _cached(self, key: tuple[str, str, datetime | None]) -> Outcome | None:
        with self._lock:
            hit = self._results.get(key)
            if hit is not None:
                self._results.move_to_end(key)
                self.counters["result_hits"] += 1
            return hit

    # -- verdicts ------------------------------------------------------------------------------------

    def check(self, query: str, dataset: str, loader: Loader) -> Outcome:
        key = (query, dataset)
        with self._lock:
            known = self._verdicts.get(key)
        if known is not None:
            return known
        con = self.database(dataset, loader)
        outcome = _run(con, query, _BIND_NOW, fetch=False)
        with self._lock:
            self.counters["binds"] += 1
            self._remember_verdict(key, outcome, authoritative=False)
            return self._verdicts[key]

    def _remember_verdict(self, key: tuple[str, str], outcome: Outcome, *, authoritative: bool) -> None:
        # Called with the lock held. A run's verdict replaces a bind's; a bind never replaces a run's.
        if not authoritative and key in self._verdicts:
            return
        self._verdicts[key] = Outcome(outcome.status, outcome.columns, (), outcome.message)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > _MAX_VERDICTS:
            self._verdicts.popitem(last=False)


def _load_database(tables: Mapping[str, Any]) -> duckdb.DuckDBPyConnection:
    from assay.scoring.intake.datasets import Table, load_relation

    con = duckdb_kql.connect(
        ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    try:
        for name, table in tables.items():
            if isinstance(table, Table):
                load_relation(con, table)
            else:
                load_rows(con, name, table)
            canonical_order(con, table.name if isinstance(table, Table) else name)
        # From here on, neither a query nor DuckDB may touch files or URLs.
        con.execute("SET enable_external_access = false")
    except BaseException:
        con.close()
        raise
    return con


def canonical_order(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Rewrite ``table`` in one canonical row order, whatever the order of its file: an open choice
    that :mod:`assay.scoring.kql.ties` does not analyse (an ``arg_max`` tie, say) then comes out
    the same on every run, and the same pair scores the same."""
    quoted = '"' + table.replace('"', '""') + '"'
    con.execute(f"CREATE OR REPLACE TABLE {quoted} AS SELECT * FROM {quoted} ORDER BY ALL")


def _run(con: duckdb.DuckDBPyConnection, query: str, now: datetime, *, fetch: bool) -> Outcome:
    started = time.perf_counter()
    cursor = con.cursor()
    try:
        columns, rows, truncated = run_on(cursor, query, now, max_rows=MAX_RESULT_ROWS, fetch=fetch)
    except KqlExecutionError as exc:
        return Outcome("error", message=_short(str(exc)), seconds=time.perf_counter() - started)
    except KqlUnsupported as exc:
        return Outcome("unsupported", message=_short(str(exc)), seconds=time.perf_counter() - started)
    finally:
        cursor.close()
    return Outcome("ok", tuple(columns), tuple(rows), None, truncated, time.perf_counter() - started)


def _short(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """An engine message cut to ``limit`` characters: ANTLR lists every token it expected."""
    return message if len(message) <= limit else message[: limit - 1] + "…"


_engine = _Engine()


def execute(query: str, dataset: str, now: datetime, loader: Loader) -> Outcome:
    """Run ``query`` on the dataset with content hash ``dataset``, ``now()`` pinned to ``now``; cached.

    ``loader`` is called (once per process per dataset) to get the tables. Its exceptions (an unknown
    dataset, a table that cannot be read) propagate and are not cached.
    """
    return _engine.execute(query, dataset, now, loader)


def check(query: str, dataset: str, loader: Loader) -> Outcome:
    """Whether ``query`` executes on the dataset: the verdict of an earlier run of it in this
    process, else that of binding it (translating and resolving names, without running it).
    The outcome carries the status, the columns when known, and the message; no rows."""
    return _engine.check(query, dataset, loader)


def stats() -> dict[str, int]:
    """Counters since the last :func:`clear`: datasets loaded, queries executed, bind-only checks,
    result cache hits."""
    with _engine._lock:
        return dict(_engine.counters)


def clear() -> None:
    """Forget every cached database, result and verdict (tests, benchmarks)."""
    global _engine
    _engine = _Engine()
