"""Summaries and progress of a batch: counts by outcome, pass rate, means and medians per component;
the same per slice of a metadata key (:func:`sliced_summary`)."""

from __future__ import annotations

import statistics
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    and_,
    case,
    func,
    select,
    true,
)
from sqlalchemy.orm import Session

from assay.scoring import slices
from assay.scoring.pipeline.components import cache_read_ratio, sum_usage
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    Item,
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


@dataclass
class _SliceTally:
    """Sums over one slice's machine scores, merged across the JSON spellings and values it holds."""

    by_status: Counter[str] = field(default_factory=Counter)
    passed: int = 0
    partial: int = 0
    total_sum: float = 0.0
    totals: int = 0
    components: dict[str, Counter[str]] = field(default_factory=dict)
    component_sums: Counter[str] = field(default_factory=Counter)

    @property
    def items(self) -> int:
        return sum(self.by_status.values())

    def merge(self, other: _SliceTally) -> None:
        self.by_status.update(other.by_status)
        self.passed += other.passed
        self.partial += other.partial
        self.total_sum += other.total_sum
        self.totals += other.totals
        for name, by_status in other.components.items():
            self.components.setdefault(name, Counter()).update(by_status)
        self.component_sums.update(other.component_sums)

    def to_dict(self) -> dict[str, Any]:
        completed = self.by_status["completed"]
        components = {}
        for name in sorted(self.components):
            by_status = self.components[name]
            ok = by_status["ok"]
            components[name] = {
                "ok": ok, "failed": by_status["failed"], "skipped": by_status["skipped"],
                "mean": round(self.component_sums[name] / ok, 6) if ok else None,
            }
        return {
            "items": self.items,
            "counts": {
                "pending": self.by_status["pending"] + self.by_status["in_progress"],
                "completed": completed,
                "passed": self.passed,
                "failed": completed - self.passed,
                "errored": self.by_status["failed"] + self.by_status["timed_out"],
                "cancelled": self.by_status["cancelled"],
                "partial": self.partial,
            },
            "pass_rate": round(self.passed / completed, 6) if completed else None,
            "mean_total": round(self.total_sum / self.totals, 6) if self.totals else None,
            "components": components,
        }


def sliced_summary(session: Session, batch_id: uuid.UUID, by: str) -> dict[str, Any]:
    """A batch's machine verdicts per slice of ``by`` (``metadata.KEY``): items, counts, pass rate and the
    means of the total and of each component. Aggregated in SQL per metadata value; a slice's ``n`` (for
    its ``small`` flag) is its completed scores."""
    key = slices.metadata_key(by)
    # Each score's metadata value read once (the payload's JSON is parsed per row it is read for),
    # then grouped twice: the scores, and their components.
    scores = (
        select(
            Score.id.label("score_id"), Score.status.label("status"), Score.passed.label("passed"),
            Score.partial.label("partial"), Score.total.label("total"), slices.value_json(key),
        )
        .join(Item, Item.id == Score.item_id)
        .where(Score.batch_id == batch_id, machine_scores())
        .cte("sliced_scores")
        .prefix_with("MATERIALIZED")
    )
    value = scores.c.slice_json
    tallies: dict[str | None, _SliceTally] = {}

    def tally(text: str | None) -> _SliceTally:
        return tallies.setdefault(slices.label_of_json(text, key), _SliceTally())

    for text, status, n, passed, partial, total_sum, totals in session.execute(
        select(
            value, scores.c.status, func.count(),
            func.sum(case((scores.c.passed.is_(True), 1), else_=0)),
            func.sum(case((scores.c.partial.is_(True), 1), else_=0)),
            func.sum(scores.c.total), func.count(scores.c.total),
        ).group_by(value, scores.c.status)
    ):
        entry = tally(text)
        entry.by_status[status] += n
        entry.passed += passed or 0
        entry.partial += partial or 0
        entry.total_sum += float(total_sum or 0.0)
        entry.totals += totals
    for text, name, status, n, score_sum in session.execute(
        select(value, ScoreComponent.component, ScoreComponent.status, func.count(), func.sum(ScoreComponent.score))
        .select_from(scores)
        .join(ScoreComponent, ScoreComponent.score_id == scores.c.score_id)
        .group_by(value, ScoreComponent.component, ScoreComponent.status)
    ):
        entry = tally(text)
        entry.components.setdefault(name, Counter())[status] += n
        if status == "ok":
            entry.component_sums[name] += float(score_sum or 0.0)
    out = []
    for found in slices.group(tallies.items(), lambda pair: pair[0], size=lambda pair: pair[1].items):
        merged = _SliceTally()
        for _, entry in found.rows:
            merged.merge(entry)
        out.append(found.describe(merged.by_status["completed"]) | merged.to_dict())
    return {"by": by, "min_items": slices.MIN_SLICE_ITEMS, "max_slices": slices.MAX_SLICES, "slices": out}
