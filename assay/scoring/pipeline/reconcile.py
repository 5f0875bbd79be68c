"""Reconciling: work a lost message left behind is found and sent again, a silent planner restarted,
a batch whose completion check a crash cut off completed, and a component that keeps crashing failed."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import (
    and_,
    exists,
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
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    Batch,
    Score,
    ScoreComponent,
    utcnow,
)


@dataclass(frozen=True)
class ReconcileReport:
    refs: list[ComponentRef]
    planning_batches: list[uuid.UUID]
    finished_batches: list[uuid.UUID]


def reconcile(
    session: Session, *, requeue_after_seconds: float, skip_pending_in: Collection[str] = (), limit: int = 5000
) -> ReconcileReport:
    """Find work a lost message left behind: expired leases, stale pending, overdue deferrals.

    Stale pending components of the queues in ``skip_pending_in`` (those with messages waiting) are
    left alone: their messages are most likely still queued. Only components of active scores count;
    the caller commits, then publishes the refs.
    """
    now = utcnow()
    stale = now - timedelta(seconds=requeue_after_seconds)
    stuck = or_(
        and_(ScoreComponent.status == "in_progress", ScoreComponent.lease_expires_at < now),
        and_(
            ScoreComponent.status == "pending",
            ScoreComponent.queue.not_in(list(skip_pending_in)),
            or_(ScoreComponent.enqueued_at.is_(None), ScoreComponent.enqueued_at < stale),
        ),
        # A deferral's own countdown message may have been lost: pick it up once it is well overdue.
        and_(ScoreComponent.status == "deferred", ScoreComponent.run_after < stale),
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
    planning = list(
        session.scalars(
            select(Batch.id).where(
                Batch.status == "planning", or_(Batch.planner_seen_at.is_(None), Batch.planner_seen_at < stale)
            )
        )
    )
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
