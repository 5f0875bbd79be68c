"""Planning a batch: its scores' component rows are created a chunk at a time, and published after
the commit (a judge component on the batch lane waits for the provider-batch submitter instead)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    select,
)
from sqlalchemy.orm import Session

from assay.scoring.pipeline.carry_over import carried_results, land_carried
from assay.scoring.pipeline.completion import complete_batch_if_done
from assay.scoring.pipeline.components import JUDGE_QUEUE, JUDGE_QUEUES, ComponentRef, queue_for
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.models import (
    Batch,
    Score,
    ScoreComponent,
    utcnow,
)
from assay.scoring.suites.criteria import load_criteria


@dataclass(frozen=True)
class PlanStep:
    refs: list[ComponentRef]
    finished: bool


def plan_chunk(session: Session, batch_id: uuid.UUID, chunk_size: int) -> PlanStep:
    """Create and mark enqueued the component rows of the next ``chunk_size`` scores of a batch.

    The caller commits, then publishes ``refs``. A crash between the two loses only messages, which
    the reconciler re-sends; ``planned_position`` makes a restarted planner resume where it stopped.
    """
    # Wait for the row rather than skip it: the check that completes a batch locks it for a moment,
    # and a planner that skipped it would stop with the batch unplanned. Two planners serialize here,
    # and the second resumes from the first's planned_position.
    batch = session.scalar(select(Batch).where(Batch.id == batch_id).with_for_update())
    if batch is None or batch.status != "planning":
        return PlanStep([], finished=True)  # gone, cancelled, stopped by its budget, or already planned
    batch.planner_seen_at = utcnow()
    rows = session.execute(
        select(Score.id, Score.position, Score.criteria_hash)
        .where(Score.batch_id == batch_id, Score.position > batch.planned_position)
        .order_by(Score.position)
        .limit(chunk_size)
    ).all()
    now = utcnow()
    if not rows:
        batch.status = "running"
        complete_batch_if_done(session, batch)
        return PlanStep([], finished=True)
    # A re-score batch pays only for what changed (the marker its builders put in the summary), and a
    # pairwise run for pairs not judged before. A calibration batch carries deterministic components
    # over but asks the judge every repeat anew.
    summary = batch.summary or {}
    calibration = "calibration" in summary
    refs = create_components(
        session,
        [(r.id, r.criteria_hash) for r in rows],
        now,
        judge_lane=batch.judge_lane,
        carry_over="rescore" in summary or "pairwise" in summary or calibration,
        carry_judges=not calibration,
    )
    batch.planned_position = rows[-1].position
    return PlanStep(refs, finished=False)


# The reason a batch-lane judge component waits with: the provider-batch submitter looks for it.
BATCH_LANE_WAITING = "batch lane: waiting to be sent in a provider batch"
# A derived component (a jury) waits with no run_after: neither the reconciler nor a claim takes it;
# a ``derives_components`` hook lands it when the rows it derives from have landed.
DERIVED_WAITING = "waiting for its members to land"


def create_components(
    session: Session,
    scores: Sequence[tuple[uuid.UUID, str]],
    enqueued_at: datetime,
    *,
    judge_lane: str = "realtime",
    carry_over: bool = False,
    carry_judges: bool = True,
    online: bool = False,
) -> list[ComponentRef]:
    """Component rows for scores (idempotent: existing rows are kept), returned as refs to publish.

    On the batch lane, judge components are not published: they wait, deferred far beyond any
    realtime retry, for the provider-batch submitter (``assay.scoring.rescoring.batch_lane``).

    ``carry_over`` (re-scores): a component whose fingerprint equals that of the same component in
    the item's latest finished score of the suite, where it landed ok (or skipped, for a metric),
    lands at once as a copy of that result at no cost and is never published (see
    :func:`carried_results`). A score all of whose components carry over is finalized here.
    ``carry_judges=False`` (calibration repeats): judge components never carry over, only metrics.
    ``online``: the components go on the online queues (``assay.scoring.online``)."""
    from assay.settings import get_settings

    refs: list[ComponentRef] = []
    rows: list[dict[str, Any]] = []
    carried_rows: list[dict[str, Any]] = []
    hold = timedelta(seconds=get_settings().provider_batch_hold_seconds)
    carried = carried_results(session, [score_id for score_id, _ in scores]) if carry_over else {}
    for score_id, criteria_hash in scores:
        criteria = load_criteria(session, criteria_hash)
        for name in criteria.rows:
            queue = queue_for(criteria, name, online=online)
            weight = criteria.row_weight(name)
            members = criteria.members_of(name)
            row = dict(
                score_id=score_id,
                component=name,
                queue=queue,
                status="pending",
                weight=weight,
                attempts=0,
                cost_usd=0.0,
                enqueued_at=enqueued_at,
                run_after=None,  # every row has the same keys: one executemany
                reason=None,
            )
            previous = carried.get((score_id, name)) if carry_judges or queue not in JUDGE_QUEUES else None
            if members and not all((score_id, member) in carried for member in members):
                previous = None  # a jury carries over only with all its members, or it would not match them
            if previous is not None:
                carried_rows.append(
                    {
                        **row,
                        "status": previous.status,
                        "score": previous.score,
                        "weighted_score": previous.score * weight if previous.score is not None else None,
                        "details": previous.details,
                        "reason": previous.reason,
                        "raw_output": previous.raw_output,
                        "carried_over_from": previous.origin,
                        "landed_at": enqueued_at,
                    }
                )
                continue
            if members:
                row.update(status="deferred", reason=DERIVED_WAITING)
            elif queue == JUDGE_QUEUE and judge_lane == "batch":
                row.update(status="deferred", run_after=enqueued_at + hold, reason=BATCH_LANE_WAITING)
            else:
                refs.append(ComponentRef(score_id, name, queue))
            rows.append(row)
    if rows:
        session.execute(dialect_insert(session)(ScoreComponent).on_conflict_do_nothing(), rows)
    if carried_rows:
        land_carried(session, carried_rows)
    return refs
