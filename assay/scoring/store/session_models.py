"""EP-0028's feedback tables (Task 1) on the one store, keyed to the generic ``scores.id``.

- ``score_missing_tools``: the judge's missing tools, one row each, in the verdict's order
  (``position``); ``normalized_name`` is the name analytics group by (case, ``-``, ``_`` and spaces
  do not matter).
- ``score_alternative_approaches`` and ``score_alternative_approach_steps``: the alternative
  approaches, in order, with their ordered steps.

They are written in the transaction that finalizes a completed score (``alert_session`` kind's
``on_finalized``) and deleted with the score (``ON DELETE CASCADE``).

``session_scores`` is a *view* (created by migration 0002, not part of ``Base.metadata``, so
autogenerate leaves it alone) with the EP's columns over ``scores``, ``items`` and the judge
component's details, one row per completed score of an ``alert_session`` item (history included).
:data:`session_scores` describes it for queries.
"""

from __future__ import annotations

import uuid

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from assay.scoring.store.base import Base


class MissingToolRow(Base):
    __tablename__ = "score_missing_tools"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    score_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("scores.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    tool_name: Mapped[str] = mapped_column(String(255), index=True)
    normalized_name: Mapped[str] = mapped_column(String(255), index=True)
    rationale: Mapped[str] = mapped_column(Text)


class AlternativeApproachRow(Base):
    __tablename__ = "score_alternative_approaches"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    score_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("scores.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(255), index=True)
    description: Mapped[str] = mapped_column(Text)

    steps: Mapped[list[AlternativeApproachStepRow]] = relationship(
        order_by="AlternativeApproachStepRow.step_order", cascade="all, delete-orphan", passive_deletes=True
    )


class AlternativeApproachStepRow(Base):
    __tablename__ = "score_alternative_approach_steps"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    approach_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("score_alternative_approaches.id", ondelete="CASCADE"), index=True
    )
    step_order: Mapped[int] = mapped_column(Integer)
    step_description: Mapped[str] = mapped_column(Text)


# The view, for queries only: its own MetaData keeps it out of Base.metadata (and autogenerate).
VIEW_METADATA = MetaData()
session_scores = Table(
    "session_scores",
    VIEW_METADATA,
    Column("score_id", Uuid, primary_key=True),
    Column("session_id", String(255)),
    Column("criteria_hash", String(64)),
    Column("total_score", Integer),
    Column("score_breakdown", JSON),
    Column("score_reasoning", Text),
    Column("scored_triggered_by", String(255)),
    Column("scored_at", DateTime(timezone=True)),
)
