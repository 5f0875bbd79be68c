"""Batch operations: a batch a service fills, progress, results, cancel, retry-failed, delete. Services
flush; callers commit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import and_, delete, func, select, tuple_, update
from sqlalchemy.orm import Session, selectinload

from assay.scoring.errors import BadRequest, Conflict, NotFound, Pruned
from assay.scoring.pipeline.budgets import BUDGET_EXHAUSTED
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.planning import DERIVED_WAITING
from assay.scoring.pipeline.summaries import batch_counts, batch_summary
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    FINISHED_SCORE_STATUSES,
    LANDED_COMPONENT_STATUSES,
    Batch,
    Item,
    Score,
    ScoreComponent,
    utcnow,
)
from assay.scoring.suites.criteria import load_criteria

RESULT_FILTERS = ("all", "finished", "passed", "failed", "errored")


def planning_batch(
    session: Session,
    *,
    suite_name: str,
    criteria_hash: str,
    created_by: str,
    lane: str,
    budget_usd: float | None,
    summary: dict[str, Any],
    total_items: int = 0,
    now: datetime | None = None,
) -> Batch:
    """A new batch, in ``planning``, that a service fills with its own pending scores (a re-score's
    waves, a calibration's repeats, a pairwise run's pairs) before its planner starts. ``planner_seen_at``
    is now, so the reconciler leaves the batch to the service unless the service dies. Flushed."""
    now = now or utcnow()
    batch = Batch(
        id=uuid.uuid4(),
        suite_name=suite_name,
        criteria_hash=criteria_hash,
        status="planning",
        created_by=created_by[:255],
        total_items=total_items,
        planned_position=-1,
        planner_seen_at=now,
        budget_usd=budget_usd,
        spent_usd=0.0,
        judge_lane=lane,
        summary=summary,
        created_at=now,
    )
    session.add(batch)
    session.flush()
    return batch


def get_batch(session: Session, batch_id: uuid.UUID) -> Batch:
    batch = session.get(Batch, batch_id)
    if batch is None:
        raise NotFound(f"no batch {batch_id}")
    return batch


def scored_batch(session: Session, batch_id: uuid.UUID) -> Batch:
    """The batch, to read its scores: ``Pruned`` when retention removed them (its row and summary stay)."""
    batch = get_batch(session, batch_id)
    if batch.pruned_at is not None:
        raise Pruned(
            f"batch {batch_id}'s scores were pruned by retention at {_aware(batch.pruned_at).isoformat()}"  # type: ignore[union-attr]
            f" ({batch.pruned_scores} removed; every item has a newer score): its summary is kept",
            pruned_at=_aware(batch.pruned_at).isoformat(),  # type: ignore[union-attr]
            pruned_scores=batch.pruned_scores,
        )
    return batch


def _aware(moment: datetime | None) -> datetime | None:
    if moment is not None and moment.tzinfo is None:  # SQLite returns naive UTC
        from datetime import timezone

        return moment.replace(tzinfo=timezone.utc)
    return moment


def progress(session: Session, batch: Batch) -> dict[str, Any]:
    counts = batch_counts(session, batch.id)
    done = counts["completed"] + counts["errored"]
    started = _aware(batch.created_at)
    end = _aware(batch.finished_at) or utcnow()
    elapsed = max((end - started).total_seconds(), 1e-6) if started else None
    rate = done / elapsed if elapsed and done else 0.0
    remaining = batch.total_items - done - counts["cancelled"]
    active = batch.status in ("planning", "running")
    return {
        "total": batch.total_items,
        "done": done,
        **counts,
        "rate_per_second": round(rate, 3),
        "eta_seconds": round(remaining / rate, 1) if active and rate > 0 else None,
        "percent": round(100.0 * done / batch.total_items, 2) if batch.total_items else 100.0,
    }


def list_batches(session: Session, *, limit: int, offset: int, suite: str | None = None) -> list[Batch]:
    query = select(Batch).order_by(Batch.created_at.desc()).limit(limit).offset(offset)
    if suite:
        query = query.where(Batch.suite_name == suite)
    return list(session.scalars(query))


def cancel(session: Session, batch: Batch) -> int:
    """Drop queued work; finished scores stay. Returns how many scores were cancelled."""
    if batch.status in ("completed", "cancelled"):
        raise Conflict(f"batch {batch.id} is already {batch.status}")
    active = select(Score.id).where(Score.batch_id == batch.id, Score.status.in_(ACTIVE_SCORE_STATUSES))
    session.execute(
        update(ScoreComponent)
        .where(ScoreComponent.score_id.in_(active), ScoreComponent.status.not_in(LANDED_COMPONENT_STATUSES))
        .values(status="cancelled", reason="batch cancelled", lease_owner=None, lease_expires_at=None)
    )
    cancelled = session.execute(
        update(Score)
        .where(Score.batch_id == batch.id, Score.status.in_(ACTIVE_SCORE_STATUSES))
        .values(status="cancelled", completed_at=utcnow(), error_message="batch cancelled")
    ).rowcount
    batch.status = "cancelled"
    batch.finished_at = utcnow()
    batch.summary = {**(batch.summary or {}), **batch_summary(session, batch.id)}
    session.flush()
    return cancelled or 0


def retry_failed(session: Session, batch: Batch) -> list[ComponentRef]:
    """Put a batch's failed scores back to work. Components that landed ok are kept, never paid again."""
    if batch.status in ("planning",):
        raise Conflict(f"batch {batch.id} is still being planned; retry when it is running or finished")
    refs, _ = _reactivate(session, batch, Score.status.in_(("failed", "timed_out")), ("failed", "skipped"))
    return refs


@dataclass(frozen=True)
class Resumed:
    refs: list[ComponentRef]
    scores: int
    needs_planner: bool


def resume(session: Session, batch: Batch, budget_usd: float | None) -> Resumed:
    """Resume a ``budget_exhausted`` batch under a new budget (None: no budget): the scores the budget
    stopped go back to work; what landed before (metrics, paid verdicts) is kept."""
    if batch.status != BUDGET_EXHAUSTED:
        raise Conflict(f"batch {batch.id} is {batch.status}; only a budget_exhausted batch can be resumed")
    if budget_usd is not None and budget_usd <= batch.spent_usd:
        raise BadRequest(
            f"the new budget (${budget_usd:.4f}) must exceed what the batch has spent (${batch.spent_usd:.4f})",
            spent_usd=batch.spent_usd,
        )
    batch.budget_usd = budget_usd
    stopped = and_(Score.status == "cancelled", Score.error_kind == BUDGET_EXHAUSTED)
    unplanned = session.scalar(
        select(func.count()).where(Score.batch_id == batch.id, stopped, Score.position > batch.planned_position)
    ) or 0
    refs, scores = _reactivate(session, batch, stopped, ("cancelled",))
    if unplanned:
        batch.status = "planning"  # the planner picks up where it stopped (planned_position)
        batch.planner_seen_at = None
    session.flush()
    return Resumed(refs, scores, needs_planner=bool(unplanned))


def _reactivate(
    session: Session, batch: Batch, which: Any, component_statuses: tuple[str, ...]
) -> tuple[list[ComponentRef], int]:
    """Scores of the batch matching ``which`` back to pending, with their components in
    ``component_statuses``; the rest of their components (landed ok: paid for) are kept."""
    score_ids = list(session.scalars(select(Score.id).where(Score.batch_id == batch.id, which)))
    if not score_ids:
        return [], 0
    refs: list[ComponentRef] = []
    for chunk in _chunks(score_ids, 1000):
        rows = session.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id.in_(chunk), ScoreComponent.status.in_(component_statuses))
            .values(
                status="pending", score=None, weighted_score=None, reason=None, attempts=0, landed_at=None,
                enqueued_at=utcnow(), details=None, run_after=None, raw_output=None, carried_over_from=None,
            )
            .returning(ScoreComponent.score_id, ScoreComponent.component, ScoreComponent.queue)
        ).all()
        # A jury waits for its members again, unpublished, as when it was planned.
        hashes = dict(session.execute(select(Score.id, Score.criteria_hash).where(Score.id.in_(chunk))).all())
        derived = [(r.score_id, r.component) for r in rows if load_criteria(session, hashes[r.score_id]).members_of(r.component)]
        if derived:
            session.execute(
                update(ScoreComponent)
                .where(tuple_(ScoreComponent.score_id, ScoreComponent.component).in_(derived))
                .values(status="deferred", reason=DERIVED_WAITING)
            )
        refs.extend(ComponentRef(r.score_id, r.component, r.queue) for r in rows if (r.score_id, r.component) not in derived)
        landed = (
            select(func.count())
            .where(ScoreComponent.score_id == Score.id, ScoreComponent.status.in_(LANDED_COMPONENT_STATUSES))
            .scalar_subquery()
        )
        session.execute(
            update(Score)
            .where(Score.id.in_(chunk))
            .values(
                status="pending", total=None, passed=None, partial=False, error_kind=None, error_message=None,
                raw_judge_output=None, completed_at=None, components_landed=landed,
            )
        )
    batch.status = "running"
    batch.finished_at = None
    session.flush()
    return refs, len(score_ids)


def _chunks(values: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def delete_batch(session: Session, batch: Batch) -> None:
    """Delete the batch, the items it uploaded and every score of those items and of the batch."""
    session.execute(delete(Batch).where(Batch.id == batch.id))
    session.flush()


@dataclass(frozen=True)
class ResultPage:
    rows: list[Score]
    total: int


def _result_query(batch_id: uuid.UUID, status: str):  # type: ignore[no-untyped-def]
    query = select(Score).where(Score.batch_id == batch_id)
    if status == "finished":
        query = query.where(Score.status.in_(FINISHED_SCORE_STATUSES))
    if status == "passed":
        query = query.where(Score.status == "completed", Score.passed.is_(True))
    elif status == "failed":
        query = query.where(Score.status == "completed", Score.passed.is_(False))
    elif status == "errored":
        query = query.where(Score.status.in_(("failed", "timed_out")))
    return query


def results_page(
    session: Session,
    batch_id: uuid.UUID,
    *,
    status: str,
    limit: int,
    offset: int,
    finished_after: datetime | None = None,
) -> ResultPage:
    """A page of results by position; or, with ``finished_after``, those finished since, oldest first
    (how a progress view follows results as they land)."""
    query = _result_query(batch_id, status)
    if finished_after is not None:
        if finished_after.tzinfo is None:
            finished_after = finished_after.replace(tzinfo=timezone.utc)
        query = query.where(Score.completed_at > finished_after)
        order = (Score.completed_at, Score.position)
    else:
        order = (Score.position,)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.options(selectinload(Score.components), selectinload(Score.item))
        .order_by(*order)
        .limit(limit)
        .offset(offset)
    ).all()
    return ResultPage(list(rows), total)


def iter_results(session: Session, batch_id: uuid.UUID, *, status: str, chunk: int = 1000) -> Iterator[Score]:
    """Every result in position order, a chunk at a time (keyset pagination: flat memory for big batches)."""
    last = -1
    while True:
        rows = session.scalars(
            _result_query(batch_id, status)
            .where(Score.position > last)
            .options(selectinload(Score.components), selectinload(Score.item))
            .order_by(Score.position)
            .limit(chunk)
        ).all()
        if not rows:
            return
        yield from rows
        last = rows[-1].position
        session.expunge_all()


def get_item(session: Session, item_id: uuid.UUID) -> tuple[Item, list[Score]]:
    item = session.get(Item, item_id)
    if item is None:
        raise NotFound(f"no item {item_id}")
    scores = session.scalars(
        select(Score)
        .where(Score.item_id == item_id, machine_scores())  # calibration repeats are no verdicts
        .options(selectinload(Score.components))
        .order_by(Score.created_at)
    ).all()
    return item, list(scores)
