"""The one store for every kind (SQLAlchemy 2). JSONB on Postgres, JSON on SQLite (embedded mode)."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from assay.scoring.store.base import Base, JsonDoc, JsonText, NullableJsonText

SCORE_STATUSES = ("pending", "in_progress", "completed", "failed", "timed_out", "cancelled")
ACTIVE_SCORE_STATUSES = ("pending", "in_progress")
FINISHED_SCORE_STATUSES = ("completed", "failed", "timed_out", "cancelled")
# A component is `pending` until claimed, `in_progress` under a lease, `deferred` on purpose until
# `run_after` (breaker open, provider batch in flight), then lands as ok / failed / skipped.
COMPONENT_STATUSES = ("pending", "in_progress", "deferred", "ok", "failed", "skipped", "cancelled")
LANDED_COMPONENT_STATUSES = ("ok", "failed", "skipped", "cancelled")
UNLANDED_COMPONENT_STATUSES = ("pending", "in_progress", "deferred")
# `budget_exhausted`: judge calls stopped when the spend reached the batch's budget; finished scores
# are kept and the rest can be resumed (POST /api/v1/batches/{id}/resume).
BATCH_STATUSES = ("planning", "running", "completed", "cancelled", "failed", "budget_exhausted")
JUDGE_LANES = ("realtime", "batch")
PROVIDER_BATCH_STATUSES = ("creating", "in_progress", "ended", "processed", "failed")
SUITE_ORIGINS = ("file", "api", "path")
SUITE_STATES = ("active", "disabled", "deleted")
SUITE_BODY_FORMATS = ("yaml", "json")
CALIBRATION_STATUSES = ("running", "completed", "failed", "cancelled")
# upload: the annotator's own label; import: another annotator's label brought in by the uploader
# (``written_by``); review: the label a review recorded (changed only by a review).
LABEL_SOURCES = ("upload", "import", "review")
REVIEW_QUEUE_STATUSES = ("open", "reviewed", "closed")
# The noise estimate of a whole score's total is stored under this component name.
TOTAL_COMPONENT = "__total__"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class CriteriaDefinition(Base):
    __tablename__ = "scoring_criteria_definitions"

    criteria_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    criteria_content: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class SuiteRecord(Base):
    """A suite's *current* criteria hash. ``origin`` says where it came from: a file in
    ``config/suites/`` (registered by the API and beat), a request body (``api``: every version in
    ``suite_versions``), or a suite file given by path to ``assay run`` (``path``, embedded mode)."""

    __tablename__ = "suites"
    __table_args__ = (
        CheckConstraint(_in("origin", SUITE_ORIGINS), name="origin"),
        CheckConstraint(_in("state", SUITE_STATES), name="state"),
    )

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    current_criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"))
    options: Mapped[dict[str, Any]]
    origin: Mapped[str] = mapped_column(String(10), default="file", server_default=text("'file'"))
    # Set through the API for API suites; a file suite is disabled by ``enabled: false`` in its file
    # (``options``). A deleted suite keeps its row, so its scores stay readable and its name reserved.
    state: Mapped[str] = mapped_column(String(10), default="active", server_default=text("'active'"))
    created_by: Mapped[str | None] = mapped_column(String(255))
    # The principal (``key:NAME`` / ``proxy:NAME``) that created an API suite: it, or an operator, may
    # change the suite. NULL for file suites, and for API suites created before owners were kept
    # (only operators change those).
    owner: Mapped[str | None] = mapped_column(String(255))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class SuiteVersion(Base):
    """One body registered through the API under a suite name, as sent, with what it resolved to."""

    __tablename__ = "suite_versions"
    __table_args__ = (
        CheckConstraint(_in("body_format", SUITE_BODY_FORMATS), name="body_format"),
        CheckConstraint("version >= 1", name="version"),
    )

    suite_name: Mapped[str] = mapped_column(ForeignKey("suites.name"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    body_format: Mapped[str] = mapped_column(String(4))
    criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"))
    options: Mapped[dict[str, Any]]
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Dataset(Base):
    """Tables an item refers to (KQL tables, pandas frames), stored once under their content hash."""

    __tablename__ = "datasets"

    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(255), index=True)
    tables: Mapped[dict[str, Any]]  # table name -> {"format": ..., "columns": [...], "rows": n}
    content: Mapped[bytes] = mapped_column(LargeBinary)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Batch(Base):
    __tablename__ = "batches"
    __table_args__ = (
        CheckConstraint(_in("status", BATCH_STATUSES), name="status"),
        CheckConstraint("total_items >= 0", name="counts"),
        CheckConstraint("budget_usd IS NULL OR budget_usd > 0", name="budget"),
        CheckConstraint(_in("judge_lane", JUDGE_LANES), name="judge_lane"),
        UniqueConstraint("idempotency_scope", "idempotency_key", name="uq_batches_idempotency_scope_key"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    suite_name: Mapped[str] = mapped_column(String(100), index=True)
    criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"))
    status: Mapped[str] = mapped_column(String(20), default="planning")
    # An Idempotency-Key is unique per principal (`idempotency_scope`); the fingerprint (suite,
    # parameters, body hash) tells a retry of the same upload from a reuse of the key for another.
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    idempotency_scope: Mapped[str | None] = mapped_column(String(255))
    idempotency_fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(255))
    total_items: Mapped[int] = mapped_column(Integer, default=0)
    # How far the planner got enqueueing (by score position); lets it resume after a crash.
    planned_position: Mapped[int] = mapped_column(Integer, default=-1)
    # When a planner last worked on (or waited for) this batch: the reconciler restarts only a silent one.
    planner_seen_at: Mapped[datetime | None]
    summary: Mapped[dict[str, Any] | None]
    # Judge calls stop once ``spent_usd`` (bumped as paid components land) reaches ``budget_usd``.
    budget_usd: Mapped[float | None] = mapped_column(Float)
    spent_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    # `batch`: judge calls go through the provider's Message Batches API (half price, hours not seconds).
    judge_lane: Mapped[str] = mapped_column(String(20), default="realtime", server_default=text("'realtime'"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # Set when retention removed the batch's scores (every item had a newer finished score): the row,
    # its summary and its items stay, and its results answer that they were pruned, never empty.
    pruned_at: Mapped[datetime | None]
    pruned_scores: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))


class BrokerEpoch(Base):
    """A broker (Redis) the store has seen, by the identity the reconciler keeps in it.

    Redis loses the identity with its messages (restarted empty, flushed, replaced): the identity the
    reconciler then finds is one this table does not hold. ``holds_since`` says which messages the
    broker can hold: those stamped (``enqueued_at``, ``planner_seen_at``) at or after it. NULL for the
    first broker the store ever saw, which was sent every message; a later one was created when the
    one before it was gone, so what was stamped before then was sent to a broker that lost it."""

    __tablename__ = "broker_epochs"

    identity: Mapped[str] = mapped_column(String(64), primary_key=True)
    holds_since: Mapped[datetime | None]
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)


class SignedInSession(Base):
    """A dashboard sign-in. The session cookie names this row; sign-out sets ``revoked_at``."""

    __tablename__ = "signed_in_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_name: Mapped[str] = mapped_column(String(255))
    key_fingerprint: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    revoked_at: Mapped[datetime | None]


class Item(Base):
    __tablename__ = "items"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    kind: Mapped[str] = mapped_column(String(40))
    external_id: Mapped[str | None] = mapped_column(String(255))
    payload: Mapped[dict[str, Any]] = mapped_column(JsonText)
    # SHA-256 of the canonical payload JSON plus the content hash of any dataset it refers to.
    # No index: nothing looks items up by content (migration 0010 dropped it; ~100 bytes per item).
    content_hash: Mapped[str] = mapped_column(String(64))
    dataset_hash: Mapped[str | None] = mapped_column(ForeignKey("datasets.content_hash"))
    # The batch that uploaded the item; deleting that batch deletes the item and all its scores.
    origin_batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_items_kind_external_id", "kind", "external_id"),)


UNLANDED_COMPONENT = _in("status", UNLANDED_COMPONENT_STATUSES)
ACTIVE_MACHINE_SCORE = f"{_in('status', ACTIVE_SCORE_STATUSES)} AND calibration_run_id IS NULL"


class Score(Base):
    """One scoring of one item under one criteria hash. Finished rows are history.

    A *calibration* score (``calibration_run_id`` set) is one of K repeats judging the same item to
    measure the judge's noise: it is no machine verdict, and every reader of verdicts leaves it out
    (:func:`assay.scoring.store.filters.machine_scores`)."""

    __tablename__ = "scores"
    __table_args__ = (
        CheckConstraint(_in("status", SCORE_STATUSES), name="status"),
        CheckConstraint("total IS NULL OR (total >= 0 AND total <= 1)", name="total_range"),
        CheckConstraint("cost_usd >= 0", name="cost"),
        CheckConstraint("components_landed >= 0 AND components_landed <= components_total", name="components"),
        # One active score per (item, criteria hash); finished ones are history. Calibration scores
        # (the same item judged K times on purpose) sit outside the rule.
        Index(
            "uq_scores_active_item_criteria",
            "item_id",
            "criteria_hash",
            unique=True,
            postgresql_where=text(ACTIVE_MACHINE_SCORE),
            sqlite_where=text(ACTIVE_MACHINE_SCORE),
        ),
        # A calibration run has one score per (item, repeat): a redelivered plan writes no second.
        Index(
            "uq_scores_calibration_item_repeat",
            "calibration_run_id",
            "item_id",
            "calibration_repeat",
            unique=True,
            postgresql_where=text("calibration_run_id IS NOT NULL"),
            sqlite_where=text("calibration_run_id IS NOT NULL"),
        ),
        Index("ix_scores_batch_position", "batch_id", "position"),
        Index("ix_scores_batch_status", "batch_id", "status"),
        Index("ix_scores_item_created", "item_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    item_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer, default=0)
    suite_name: Mapped[str] = mapped_column(String(100))
    criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"), index=True)
    status: Mapped[str] = mapped_column(String(20), default="pending")
    total: Mapped[float | None] = mapped_column(Float)
    passed: Mapped[bool | None] = mapped_column(Boolean)
    # True when a skipped component's weight was spread over the others (see `renormalized`).
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    components_total: Mapped[int] = mapped_column(Integer)
    components_landed: Mapped[int] = mapped_column(Integer, default=0)
    error_kind: Mapped[str | None] = mapped_column(String(40))
    error_message: Mapped[str | None] = mapped_column(Text)
    raw_judge_output: Mapped[str | None] = mapped_column(Text)
    usage: Mapped[dict[str, Any] | None] = mapped_column(NullableJsonText)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    triggered_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]
    # Looked up through uq_scores_calibration_item_repeat (it leads with this column and holds every
    # row where it is set): no index of its own (migration 0010).
    calibration_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("calibration_runs.id", ondelete="CASCADE"))
    # 1..K within its calibration run; NULL for every machine score.
    calibration_repeat: Mapped[int | None] = mapped_column(Integer)

    components: Mapped[list[ScoreComponent]] = relationship(
        back_populates="parent", order_by="ScoreComponent.component", cascade="all, delete-orphan", passive_deletes=True
    )
    item: Mapped[Item] = relationship()


class ScoreComponent(Base):
    __tablename__ = "score_components"
    __table_args__ = (
        CheckConstraint(_in("status", COMPONENT_STATUSES), name="status"),
        CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name="score_range"),
        CheckConstraint("weight > 0 AND weight <= 1", name="weight_range"),
        CheckConstraint("attempts >= 0", name="attempts"),
        # Only unlanded rows are looked up by status (the reconciler, the lease heartbeat, the batch
        # lane): landed rows, nearly all of them, stay out. Keyed by status alone, its entries share
        # keys (deduplicated, a few bytes each), and a lease renewal changes no indexed column
        # (migration 0010).
        Index(
            "ix_score_components_unlanded_status",
            "status",
            postgresql_where=text(UNLANDED_COMPONENT),
            sqlite_where=text(UNLANDED_COMPONENT),
        ),
        # Set only while a judge request sits in a provider batch (batch lane).
        Index(
            "ix_score_components_provider_batch_id",
            "provider_batch_id",
            postgresql_where=text("provider_batch_id IS NOT NULL"),
            sqlite_where=text("provider_batch_id IS NOT NULL"),
        ),
    )

    score_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("scores.id", ondelete="CASCADE"), primary_key=True)
    component: Mapped[str] = mapped_column(String(64), primary_key=True)
    queue: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20), default="pending")
    score: Mapped[float | None] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float)
    weighted_score: Mapped[float | None] = mapped_column(Float)
    details: Mapped[dict[str, Any] | None] = mapped_column(NullableJsonText)
    reason: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    # Set for `deferred` components: the reconciler leaves them alone until then.
    run_after: Mapped[datetime | None]
    enqueued_at: Mapped[datetime | None]
    # A metric's (no tokens) is SQL NULL.
    usage: Mapped[dict[str, Any] | None] = mapped_column(NullableJsonText)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    landed_at: Mapped[datetime | None]
    # Set while the component's judge request sits in a provider batch (batch lane): its verdict
    # comes from that batch's results, so the realtime lane must not send it meanwhile.
    provider_batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("provider_batches.id", ondelete="SET NULL"))
    # A judge component's raw answer when it was unusable (kept for a look; per judge component).
    raw_output: Mapped[str | None] = mapped_column(Text)
    # Set when a re-score copied this result from an earlier score of the same item whose component
    # had the same fingerprint: the score whose run computed it. No foreign key: that score is history.
    carried_over_from: Mapped[uuid.UUID | None] = mapped_column(Uuid)

    parent: Mapped[Score] = relationship(back_populates="components")


class ProviderBatch(Base):
    """One provider batch (an Anthropic Message Batch, an OpenAI Batch) holding judge requests of one
    component of one Assay batch, all for one model.

    Stored before the provider is called (status ``creating``) so a worker restart never loses track
    of a paid batch; ``provider_id`` is filled once the provider accepted it."""

    __tablename__ = "provider_batches"
    __table_args__ = (CheckConstraint(_in("status", PROVIDER_BATCH_STATUSES), name="status"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    provider_id: Mapped[str | None] = mapped_column(String(100), unique=True)
    batch_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    component: Mapped[str] = mapped_column(String(64))
    # The judge provider (config/models.yaml) whose batch API took it, and is polled for it.
    provider: Mapped[str] = mapped_column(String(64), default="anthropic", server_default="anthropic")
    model: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), default="creating")
    request_count: Mapped[int] = mapped_column(Integer)
    request_bytes: Mapped[int] = mapped_column(BigInteger)
    # What the provider reported when it ended: its counts (Anthropic: succeeded / errored / expired /
    # canceled; OpenAI: total / completed / failed) and its final ``status``.
    request_counts: Mapped[dict[str, Any] | None]
    polls: Mapped[int] = mapped_column(Integer, default=0)
    next_poll_at: Mapped[datetime | None] = mapped_column(index=True)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]
    processed_at: Mapped[datetime | None]


class CalibrationRun(Base):
    """Judging a sample of a suite's stored items K times under its current criteria, to measure the
    judge's noise. Its scores are carried by ``batch_id`` (budgets, estimates, planning, progress)."""

    __tablename__ = "calibration_runs"
    __table_args__ = (
        CheckConstraint(_in("status", CALIBRATION_STATUSES), name="status"),
        CheckConstraint("sample >= 1", name="sample"),
        CheckConstraint("repeats >= 2", name="repeats"),
        Index("ix_calibration_runs_suite_created", "suite_name", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    suite_name: Mapped[str] = mapped_column(String(100))
    criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"))
    batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"), index=True)
    sample: Mapped[int] = mapped_column(Integer)
    repeats: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="running")
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]


PAIRWISE_STATUSES = ("running", "completed", "failed", "cancelled")


class PairwiseRun(Base):
    """Two or more batches compared item by item under a suite's pairwise rubric. Its pairs are the
    items of ``batch_id`` (kind ``pairwise``), judged under ``criteria_hash``: the pairwise criteria's
    own hash, not the suite's. ``report`` (wins, the win rate, Bradley-Terry strengths) is stored when
    the batch finishes."""

    __tablename__ = "pairwise_runs"
    __table_args__ = (
        CheckConstraint(_in("status", PAIRWISE_STATUSES), name="status"),
        Index("ix_pairwise_runs_suite_created", "suite_name", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    suite_name: Mapped[str] = mapped_column(String(100))
    criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"))
    batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"), index=True)
    # The compared batches in the order given: [{"batch_id": ..., "label": ...}].
    systems: Mapped[list[Any]] = mapped_column(JsonDoc)
    # How the pairs were planned (all pairs, or the connected design with its cap) and the slice key.
    design: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(20), default="running")
    report: Mapped[dict[str, Any] | None]
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]


class NoiseEstimate(Base):
    """A calibration run's pooled within-item standard deviation of one judge component (or of the
    total, component ``__total__``, which alone carries ``flip_share``)."""

    __tablename__ = "noise_estimates"
    __table_args__ = (
        CheckConstraint("sigma_w IS NULL OR sigma_w >= 0", name="sigma_w"),
        CheckConstraint("flip_share IS NULL OR (flip_share >= 0 AND flip_share <= 1)", name="flip_share"),
        CheckConstraint("items >= 0 AND repeats >= 0", name="counts"),
        Index("ix_noise_estimates_hash_computed", "criteria_hash", "computed_at"),
    )

    calibration_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("calibration_runs.id", ondelete="CASCADE"), primary_key=True
    )
    component: Mapped[str] = mapped_column(String(64), primary_key=True)
    criteria_hash: Mapped[str] = mapped_column(ForeignKey("scoring_criteria_definitions.criteria_hash"))
    suite_name: Mapped[str] = mapped_column(String(100))
    sigma_w: Mapped[float | None] = mapped_column(Float)
    # Items with at least two usable repeats (those the estimate pools over), and the run's K.
    items: Mapped[int] = mapped_column(Integer)
    repeats: Mapped[int] = mapped_column(Integer)
    flip_share: Mapped[float | None] = mapped_column(Float)
    computed_at: Mapped[datetime] = mapped_column(default=utcnow)


class Label(Base):
    """A person's verdict on an item for a suite: uploaded, imported, or recorded as a review (a gold
    label). ``annotator`` is whose verdict it is; ``written_by`` the principal that stored it. A label
    is replaced only by the principal that wrote it (a review's label only by a review)."""

    __tablename__ = "labels"
    __table_args__ = (
        UniqueConstraint("suite_name", "item_id", "annotator", name="uq_labels_suite_item_annotator"),
        CheckConstraint("passed IS NOT NULL OR score IS NOT NULL", name="verdict"),
        CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name="score_range"),
        CheckConstraint(_in("source", LABEL_SOURCES), name="source"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    suite_name: Mapped[str] = mapped_column(String(100))
    item_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    annotator: Mapped[str] = mapped_column(String(255))
    written_by: Mapped[str] = mapped_column(String(255))
    passed: Mapped[bool | None] = mapped_column(Boolean)
    score: Mapped[float | None] = mapped_column(Float)
    comment: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ReviewQueueEntry(Base):
    """A finalized machine score a suite's review rules picked for a person to look at."""

    __tablename__ = "review_queue"
    __table_args__ = (
        CheckConstraint(_in("status", REVIEW_QUEUE_STATUSES), name="status"),
        Index("ix_review_queue_suite_status", "suite_name", "status"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    score_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("scores.id", ondelete="CASCADE"), unique=True)
    suite_name: Mapped[str] = mapped_column(String(100))
    item_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    criteria_hash: Mapped[str] = mapped_column(String(64))
    # The rules that matched: [{"rule": name, ...detail}].
    reasons: Mapped[list[Any]] = mapped_column(JsonDoc)
    status: Mapped[str] = mapped_column(String(10), default="open")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    closed_at: Mapped[datetime | None]


class Review(Base):
    """A person's verdict on a machine score. The machine score is never changed; the review also
    becomes the reviewer's label on the item (``labels``, source ``review``)."""

    __tablename__ = "reviews"
    __table_args__ = (CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name="score_range"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    queue_entry_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("review_queue.id", ondelete="SET NULL"), index=True
    )
    score_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("scores.id", ondelete="CASCADE"), index=True)
    item_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    suite_name: Mapped[str] = mapped_column(String(100))
    reviewer: Mapped[str] = mapped_column(String(255))
    passed: Mapped[bool] = mapped_column(Boolean)
    score: Mapped[float | None] = mapped_column(Float)
    comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# EP-0028's feedback tables and online scoring's tables live in their own module but in this metadata: whoever reads the models
# (Alembic, the store) has every table.
from assay.scoring.store import online_models, session_models  # noqa: E402,F401
