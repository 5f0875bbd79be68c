"""Online scoring's tables: the spans an application exported (OTLP), the traces they make up, what
the sampler decided for each trace and rule, and the link from an online score to its trace.

- ``spans``: every span as received, before anything else happens to it (ARCHITECTURE.md, invariant
  12). On PostgreSQL the table is partitioned by day of receipt (``received_at``): a partition per UTC
  day, created ahead by beat and on demand at ingest, and dropped whole once it is older than
  ``ASSAY_SPAN_RETENTION_DAYS`` (``assay.scoring.online.spans``). SQLite (the embedded mode) keeps a
  plain table and deletes old rows instead. An exporter that retries sends a span twice: both rows are
  kept, and the sampler reads each (trace, span) once.
- ``online_traces``: one row per trace id, upserted with each export, saying when its root span ended
  and when its last span arrived (the sampler's index of traces that may be complete), how many spans
  it has and how many of them arrived after it was decided.
- ``online_decisions``: per trace and per rule of a suite, what the sampler decided (``scored``,
  ``sampled_out``, ``over_budget``, ``no_match``, ``invalid``), so each trace is decided once.
- ``online_scores``: an online score's trace and span ids, its suite, rule and slice: what the
  rolling windows read, and what tells an online item from an uploaded one.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from assay.scoring.store.base import Base, JsonText, NullableJsonText


def utcnow() -> datetime:
    # Not models.utcnow: models imports this module (every table in one metadata), so this one imports no model.
    return datetime.now(timezone.utc)


DECISIONS = ("scored", "sampled_out", "over_budget", "no_match", "invalid")


class Span(Base):
    __tablename__ = "spans"
    __table_args__ = (
        Index("ix_spans_trace", "trace_id"),
        {"postgresql_partition_by": "RANGE (received_at)"},
    )

    # The partition key is part of the primary key (PostgreSQL requires it of a partitioned table).
    received_at: Mapped[datetime] = mapped_column(primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    trace_id: Mapped[str] = mapped_column(String(32))  # lowercase hex, as OTLP/JSON writes it
    span_id: Mapped[str] = mapped_column(String(16))
    parent_span_id: Mapped[str | None] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(Text)
    service_name: Mapped[str | None] = mapped_column(String(255))
    kind: Mapped[int] = mapped_column(Integer, default=0)
    start_unix_nano: Mapped[int] = mapped_column(BigInteger)
    end_unix_nano: Mapped[int] = mapped_column(BigInteger)
    status_code: Mapped[int] = mapped_column(Integer, default=0)
    status_message: Mapped[str | None] = mapped_column(Text)
    attributes: Mapped[dict[str, Any]] = mapped_column(JsonText)
    resource: Mapped[dict[str, Any]] = mapped_column(JsonText)
    events: Mapped[list[Any] | None] = mapped_column(NullableJsonText)


class OnlineTrace(Base):
    __tablename__ = "online_traces"
    __table_args__ = (Index("ix_online_traces_open", "decided", "last_received_at"),)

    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    first_received_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_received_at: Mapped[datetime] = mapped_column(default=utcnow)
    # When the span without a parent (the root) arrived ended; NULL while it has not arrived.
    root_ended_at: Mapped[datetime | None]
    # Every rule decided: the sampler looks at it no more until a span arrives late, which re-opens it.
    decided: Mapped[bool] = mapped_column(Boolean, default=False)
    span_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # Spans stored while the trace was decided (late): per-span rules score them, per-trace rules do not.
    late_spans: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))


class OnlineDecision(Base):
    __tablename__ = "online_decisions"
    __table_args__ = (Index("ix_online_decisions_rule_day", "suite_name", "rule", "day", "decision"),)

    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    suite_name: Mapped[str] = mapped_column(String(100), primary_key=True)
    rule: Mapped[str] = mapped_column(String(100), primary_key=True)
    decision: Mapped[str] = mapped_column(String(20))
    # How many items the rule made of the trace (per-span rules make one per matching span).
    items: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text)
    day: Mapped[str] = mapped_column(String(10))  # the UTC day the decision counts against (budgets)
    decided_at: Mapped[datetime] = mapped_column(default=utcnow)


class OnlineScore(Base):
    __tablename__ = "online_scores"
    __table_args__ = (Index("ix_online_scores_suite_created", "suite_name", "created_at"),)

    score_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("scores.id", ondelete="CASCADE"), primary_key=True)
    item_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    suite_name: Mapped[str] = mapped_column(String(100))
    rule: Mapped[str] = mapped_column(String(100))
    trace_id: Mapped[str] = mapped_column(String(32), index=True)
    span_id: Mapped[str | None] = mapped_column(String(16))  # NULL for a per-trace item
    slice: Mapped[str | None] = mapped_column(String(255))  # the value of the rule's slice_by attribute
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
