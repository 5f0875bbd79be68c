"""Summaries and progress of a batch: counts by outcome, pass rate, means and medians per component."""

from __future__ import annotations

import statistics
import uuid
from collections import Counter
from typing import Any

from sqlalchemy import (
    and_,
    case,
    func,
    select,
    true,
)
from sqlalchemy.orm import Session

from assay.scoring.pipeline.components import cache_read_ratio, sum_usage
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    Score,
    ScoreComponent,
)


def batch_counts(session: Session, batch_id: uuid.UUID, *, machine_only: bool = False) -> dict[str, int]:
    """Scores of a batch by outcome; ``machine_only``: calibration repeats left out (verdict summaries),
    else every score (progress)."""
    rows = session.execute(
        select(
            Score.status,
            func.count(),
            func.sum(case((Score.passed.is_(True), 1), else_=0)),
            func.sum(case((Score.partial.is_(True), 1), else_=0)),
        )
        .where(Score.batch_id == batch_id, machine_scores() if machine_only else true())
        .group_by(Score.status)
    ).all()
    by_status = {status: n for status, n, _, _ in rows}
    passed = sum(p or 0 for _, _, p, _ in rows)
    completed = by_status.get("completed", 0)
    return {
        "pending": by_status.get("pending", 0),
        "in_progress": by_status.get("in_progress", 0),
        "completed": completed,
        "passed": passed,
        "failed": completed - passed,  # scored below the threshold (or blocked from passing)
        "errored": by_status.get("failed", 0) + by_status.get("timed_out", 0),
        "cancelled": by_status.get("cancelled", 0),
        "partial": sum(p or 0 for _, _, _, p in rows),
    }


def batch_summary(session: Session, batch_id: uuid.UUID) -> dict[str, Any]:
    """A batch's machine verdicts (counts, pass rate, mean total, per component, errors): calibration
    repeats are left out, so a calibration batch reports none. ``cost_usd`` and ``usage`` are what the
    batch spent, calibration calls included."""
    counts = batch_counts(session, batch_id, machine_only=True)
    components: dict[str, dict[str, Any]] = {}
    for name, status, n, mean in session.execute(
        select(ScoreComponent.component, ScoreComponent.status, func.count(), func.avg(ScoreComponent.score))
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(Score.batch_id == batch_id, machine_scores())
        .group_by(ScoreComponent.component, ScoreComponent.status)
    ):
        entry = components.setdefault(name, {"ok": 0, "failed": 0, "skipped": 0, "mean": None, "median": None})
        if status in entry:
            entry[status] = n
        if status == "ok":
            entry["mean"] = round(float(mean), 6) if mean is not None else None
    for name, entry in components.items():
        entry["median"] = _median_component(session, batch_id, name)
    errors = Counter(
        kind
        for (kind,) in session.execute(
            select(Score.error_kind).where(
                Score.batch_id == batch_id, Score.status.in_(("failed", "timed_out")), machine_scores()
            )
        )
    )
    scored = counts["completed"]
    total_stats = session.execute(
        select(
            func.avg(case((machine_scores(), Score.total), else_=None)), func.sum(Score.cost_usd)
        ).where(Score.batch_id == batch_id)
    ).one()
    usage = sum_usage(
        u for (u,) in session.execute(select(Score.usage).where(Score.batch_id == batch_id, Score.usage.is_not(None)))
    )
    return {
        "counts": counts,
        "pass_rate": round(counts["passed"] / scored, 6) if scored else None,
        "mean_total": round(float(total_stats[0]), 6) if total_stats[0] is not None else None,
        "cost_usd": float(total_stats[1] or 0.0),
        "usage": usage,
        "cache_read_ratio": cache_read_ratio(usage),
        "components": components,
        "errors_by_kind": dict(errors),
    }


def _median_component(session: Session, batch_id: uuid.UUID, component: str) -> float | None:
    where = and_(
        Score.batch_id == batch_id, ScoreComponent.component == component, ScoreComponent.status == "ok", machine_scores()
    )
    if session.get_bind().dialect.name == "postgresql":
        value = session.scalar(
            select(func.percentile_cont(0.5).within_group(ScoreComponent.score))
            .select_from(ScoreComponent)
            .join(Score, Score.id == ScoreComponent.score_id)
            .where(where)
        )
        return round(float(value), 6) if value is not None else None
    values = session.scalars(
        select(ScoreComponent.score).join(Score, Score.id == ScoreComponent.score_id).where(where)
    ).all()
    return round(statistics.median(values), 6) if values else None
