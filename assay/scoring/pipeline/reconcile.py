"""Reconciling: work a lost message left behind is found and sent again, a silent planner restarted,
a batch whose completion check a crash cut off completed, and a component that keeps crashing failed.
The brokers the store has seen (``broker_epochs``) say which messages a broker that lost its own
(restarted empty, or replaced) took with it."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    and_,
    exists,
    false,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.budgets import BUDGET_EXHAUSTED
from assay.scoring.pipeline.completion import complete_batch_if_done
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.landing import land
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    Batch,
    BrokerEpoch,
    Score,
    ScoreComponent,
    utcnow,
)


# Components one ordinary pass takes up at most; the rest wait for the next pass.
RECONCILE_LIMIT = 5000


@dataclass(frozen=True)
class ReconcileReport:
    refs: list[ComponentRef]
    planning_batches: list[uuid.UUID]
    finished_batches: list[uuid.UUID]


def broker_holds_since(session: Session, identity: str, created_at: datetime | None) -> datetime | None:
    """When the broker named ``identity`` started holding the messages sent to it (None: it holds every
    message the store stamped). Records a broker not seen before: the first one the store sees holds
    everything; a later one holds what was stamped since it was created (``created_at``, from the
    identity itself; now when that is unknown, which may re-send a little but never loses work)."""
    known = session.get(BrokerEpoch, identity)
    if known is not None:
        return known.holds_since
    first = session.scalar(select(BrokerEpoch.identity).limit(1)) is None
    holds_since = None if first else (created_at or utcnow())
    # Two reconcilers meeting a new broker at once record the same row: the second one's is dropped.
    session.execute(
        dialect_insert(session)(BrokerEpoch)
        .values(identity=identity, holds_since=holds_since, recorded_at=utcnow())
        .on_conflict_do_nothing(index_elements=[BrokerEpoch.identity])
    )
    return session.get(BrokerEpoch, identity, populate_existing=True).holds_since  # type: ignore[union-attr]


def reconcile(
    session: Session,
    *,
    requeue_after_seconds: float,
    skip_pending_in: Collection[str] = (),
    lost_before: datetime | None = None,
    limit: int = RECONCILE_LIMIT,
) -> ReconcileReport:
    """Find work a lost message left behind: expired leases, stale pending, overdue deferrals.

    Stale pending components of the queues in ``skip_pending_in`` (those with messages waiting) are
    left alone: their messages are most likely still queued. What was sent before ``lost_before`` went
    to a broker that lost it (:func:`broker_holds_since`): such pending components, due deferrals and
    planners are taken up at once, wherever the queues stand; they are stamped now, so the next pass
    leaves them to the rules above. Only components of active scores count; the caller commits, then
    publishes the refs.
    """
    now = utcnow()
    stale = now - timedelta(seconds=requeue_after_seconds)
    sent_to_lost_broker = (
        or_(ScoreComponent.enqueued_at.is_(None), ScoreComponent.enqueued_at < lost_before)
        if lost_before is not None
        else false()
    )
    stuck = or_(
        and_(ScoreComponent.status == "in_progress", ScoreComponent.lease_expires_at < now),
        and_(
            ScoreComponent.status == "pending",
            ScoreComponent.queue.not_in(list(skip_pending_in)),
            or_(ScoreComponent.enqueued_at.is_(None), ScoreComponent.enqueued_at < stale),
        ),
        # A deferral's own countdown message may have been lost: pick it up once it is well overdue.
        and_(ScoreComponent.status == "deferred", ScoreComponent.run_after < stale),
        and_(ScoreComponent.status == "pending", sent_to_lost_broker),
        and_(ScoreComponent.status == "deferred", ScoreComponent.run_after < now, sent_to_lost_broker),
    )
    rows = session.execute(
        select(ScoreComponent.score_id, ScoreComponent.component, ScoreComponent.queue)
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(stuck, Score.status.in_(ACTIVE_SCORE_STATUSES))
        .limit(limit)
    ).all()
    refs = [ComponentRef(r.score_id, r.component, r.queue) for r in rows]
    for ref in refs:
        session.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component)
            .values(enqueued_at=now)
        )
    # A planner waiting on backpressure checks in too (note_planner_waiting): only silent ones restart.
    planner_lost_before = stale if lost_before is None else max(stale, lost_before)
    planning = list(
        session.scalars(
            select(Batch.id).where(
                Batch.status == "planning",
                or_(Batch.planner_seen_at.is_(None), Batch.planner_seen_at < planner_lost_before),
            )
        )
    )
    if planning:
        # A planner restarted now has its message queued: not silent until it is stale again.
        session.execute(update(Batch).where(Batch.id.in_(planning)).values(planner_seen_at=now))
    # Batches whose last score finished in a transaction whose worker died before it could check.
    finished = session.scalars(
        select(Batch)
        .where(
            Batch.status.in_(("running", BUDGET_EXHAUSTED)),
            Batch.finished_at.is_(None),
            ~exists().where(Score.batch_id == Batch.id, Score.status.in_(ACTIVE_SCORE_STATUSES)),
        )
        .with_for_update(skip_locked=True)
    ).all()
    for batch in finished:
        complete_batch_if_done(session, batch)
    return ReconcileReport(refs, planning, [batch.id for batch in finished])


def note_planner_waiting(session: Session, batch_id: uuid.UUID) -> None:
    """A planner paused by backpressure is alive: say so, so the reconciler starts no second one."""
    session.execute(update(Batch).where(Batch.id == batch_id).values(planner_seen_at=utcnow()))


def expire_poison(session: Session, ref: ComponentRef, attempts: int, max_attempts: int) -> bool:
    """A component claimed more than ``max_attempts`` times keeps crashing or outliving its worker: fail it."""
    if attempts <= max_attempts:
        return False
    last_error = session.scalar(
        select(ScoreComponent.reason).where(
            ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component
        )
    )
    why = f"last error: {last_error}" if last_error else "the worker died or ran past its lease each time"
    land(session, ref, ComponentResult.failed(f"gave up after {attempts - 1} attempts; {why}"), timed_out=not last_error)
    return True
