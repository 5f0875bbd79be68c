"""The span store: spans written before anything else, day partitions, and the window they are kept.

On PostgreSQL ``spans`` is partitioned by UTC day of receipt. A partition is created on demand the
first time a process stores a span on a day it has not seen (``CREATE TABLE IF NOT EXISTS ...
PARTITION OF``, under an advisory lock so two processes do not race in the catalog) and ahead of
time by beat (:func:`ensure_partitions`, today and the next days), so the first export after
midnight does not wait for DDL. Retention (:func:`drop_expired`, run with the nightly retention job)
drops whole partitions older than ``ASSAY_SPAN_RETENTION_DAYS``: no row-by-row delete, no bloat. On
SQLite (the embedded mode) the table is plain and old rows are deleted.

``online_traces`` is upserted with the spans: when a trace's last span arrived and when its root span
ended, for the sampler to find traces that may be complete. A span stored for a trace already decided
is *late*: it is counted and re-opens the trace (see ``assay.scoring.online.sampler``).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from sqlalchemy import case, delete, func, insert, select, text
from sqlalchemy.orm import Session

from assay.scoring.store.db import dialect_insert
from assay.scoring.store.online_models import OnlineDecision, OnlineTrace, Span

SPANS = Span.__table__
_PARTITION_LOCK = 0x5350414E  # "SPAN": the advisory lock partition DDL takes
_known_days: set[date] = set()
_known_lock = threading.Lock()


def partition_name(day: date) -> str:
    return f"spans_{day:%Y%m%d}"


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _create_partition(session: Session, day: date) -> None:
    start = datetime.combine(day, time(), tzinfo=timezone.utc)
    end = start + timedelta(days=1)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PARTITION_LOCK})
    session.execute(
        text(
            f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF spans "
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    )


def ensure_partitions(session: Session, today: date, days_ahead: int) -> list[str]:
    """Partitions for ``today`` and the ``days_ahead`` days after it (beat's tick); their names."""
    if not _is_postgres(session):
        return []
    days = [today + timedelta(days=n) for n in range(days_ahead + 1)]
    for day in days:
        _create_partition(session, day)
    return [partition_name(day) for day in days]


def _ensure_day(session: Session, day: date) -> None:
    """On demand at ingest: a day this process has not stored spans on yet gets its partition, in a
    transaction of its own (committed before the spans' insert needs it)."""
    with _known_lock:
        if day in _known_days:
            return
    from assay.scoring.store.db import transaction

    with transaction() as ddl:
        _create_partition(ddl, day)
    with _known_lock:
        _known_days.add(day)


_JSON_COLUMNS = {"attributes", "resource", "events"}
_COPIED = [column.name for column in SPANS.columns if column.name not in ("id", "received_at")]


def _copy_spans(session: Session, rows: Sequence[dict[str, Any]], received_at: datetime) -> None:
    """PostgreSQL: the spans streamed by ``COPY`` on the session's connection (its transaction): one
    statement for the request, where an executemany INSERT ran one per span and cost the API about
    40 µs of CPU and PostgreSQL about 450 µs of wall time per span (bench/online.py)."""
    from psycopg.types.json import Json

    cursor = session.connection().connection.driver_connection.cursor()
    statement = f"COPY spans (id, received_at, {', '.join(_COPIED)}) FROM STDIN"
    with cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(
                (
                    uuid.uuid4(),
                    received_at,
                    *(
                        (Json(row[name]) if row[name] is not None else None) if name in _JSON_COLUMNS else row[name]
                        for name in _COPIED
                    ),
                )
            )


@dataclass(frozen=True)
class Stored:
    spans: int
    traces: int


def store_spans(session: Session, rows: Sequence[dict[str, Any]], received_at: datetime) -> Stored:
    """Write the spans and update their traces' index, in the caller's transaction."""
    if not rows:
        return Stored(0, 0)
    if _is_postgres(session):
        _ensure_day(session, received_at.astimezone(timezone.utc).date())
        _copy_spans(session, rows, received_at)
    else:
        session.execute(insert(SPANS), [{**row, "id": uuid.uuid4(), "received_at": received_at} for row in rows])
    traces: dict[str, datetime | None] = {}
    counts: Counter[str] = Counter()
    for row in rows:
        ended = None
        if row["parent_span_id"] is None:
            ended = datetime.fromtimestamp(row["end_unix_nano"] / 1e9, timezone.utc) if row["end_unix_nano"] else received_at
        traces[row["trace_id"]] = ended or traces.get(row["trace_id"])
        counts[row["trace_id"]] += 1
    statement = dialect_insert(session)(OnlineTrace)
    arrived = statement.excluded.span_count
    statement = statement.on_conflict_do_update(
        index_elements=[OnlineTrace.trace_id],
        set_={
            "last_received_at": statement.excluded.last_received_at,
            "root_ended_at": func.coalesce(OnlineTrace.root_ended_at, statement.excluded.root_ended_at),
            "span_count": OnlineTrace.span_count + arrived,
            # The row as committed when this upsert got its lock: spans for a decided trace are late, and
            # re-open it (the sampler scores them for per-span rules once the trace is quiet again).
            "late_spans": OnlineTrace.late_spans + case((OnlineTrace.decided, arrived), else_=0),
            "decided": False,
        },
    )
    # Sorted: two exports touching the same traces lock their rows in one order (no deadlock).
    session.execute(
        statement,
        [
            dict(
                trace_id=trace_id, first_received_at=received_at, last_received_at=received_at, root_ended_at=ended,
                decided=False, span_count=counts[trace_id], late_spans=0,
            )
            for trace_id, ended in sorted(traces.items())
        ],
    )
    return Stored(len(rows), len(traces))


def _partitions(session: Session) -> list[tuple[str, date]]:
    names = session.scalars(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'spans'"
        )
    ).all()
    found = []
    for name in names:
        try:
            found.append((name, datetime.strptime(name.removeprefix("spans_"), "%Y%m%d").date()))
        except ValueError:
            continue  # a partition someone attached by hand: not this module's to drop
    return found


@dataclass(frozen=True)
class Expired:
    partitions: list[str]
    spans: int
    traces: int


def drop_expired(session: Session, today: date, keep_days: int) -> Expired:
    """Drop the spans received before ``today - keep_days`` (whole partitions on PostgreSQL) and the
    trace index rows that only they made. Online scores keep their trace and span ids."""
    cutoff_day = today - timedelta(days=keep_days)
    cutoff = datetime.combine(cutoff_day, time(), tzinfo=timezone.utc)
    dropped: list[str] = []
    removed = 0
    if _is_postgres(session):
        for name, day in sorted(_partitions(session), key=lambda p: p[1]):
            if day < cutoff_day:
                session.execute(text(f"DROP TABLE IF EXISTS {name}"))
                dropped.append(name)
        with _known_lock:
            _known_days.difference_update({d for d in _known_days if d < cutoff_day})
    else:
        removed = session.execute(delete(Span).where(Span.received_at < cutoff)).rowcount or 0
    old = select(OnlineTrace.trace_id).where(OnlineTrace.last_received_at < cutoff)
    session.execute(delete(OnlineDecision).where(OnlineDecision.trace_id.in_(old)))
    traces = session.execute(delete(OnlineTrace).where(OnlineTrace.last_received_at < cutoff)).rowcount or 0
    return Expired(dropped, removed, traces)


def spans_of(session: Session, trace_ids: Sequence[str]) -> dict[str, list[Span]]:
    """Each trace's spans, once per span id (an exporter's retry stores a span twice), by start time."""
    found: dict[str, dict[str, Span]] = {trace_id: {} for trace_id in trace_ids}
    for span in session.scalars(select(Span).where(Span.trace_id.in_(list(trace_ids))).order_by(Span.received_at)):
        found[span.trace_id][span.span_id] = span
    return {
        trace_id: sorted(spans.values(), key=lambda s: (s.start_unix_nano, s.span_id)) for trace_id, spans in found.items()
    }
