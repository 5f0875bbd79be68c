"""Online results over time: rolling windows and time series of the scores online rules made.

A window (``5m``, ``1h``, ``1d``) ending now holds the online scores that *finished* in it (completed,
so with a total; a failed score has none and is counted apart as ``failed``). Per suite, overall and
per slice (the value of a rule's ``slice_by`` attribute): the count, the pass rate, and the mean, p50
and p90 of the total and of each component's score. Percentiles are PostgreSQL's ``percentile_cont``
(interpolated); SQLite, which has none, gets the same numbers computed here.

A series cuts a window into buckets (30 s for 5m, 5 min for 1h, 1 h for 1d), each with its count and
pass rate: the points of the dashboard's chart, each linking to the scores it holds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Integer, case, cast, func, select
from sqlalchemy.orm import Session

from assay.scoring.store.models import Score, ScoreComponent
from assay.scoring.store.online_models import OnlineScore

WINDOWS = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1), "1d": timedelta(days=1)}
BUCKETS = {"5m": timedelta(seconds=30), "1h": timedelta(minutes=5), "1d": timedelta(hours=1)}
OUTCOMES = ("completed", "failed", "timed_out")


@dataclass(frozen=True)
class Distribution:
    mean: float | None
    p50: float | None
    p90: float | None


@dataclass
class WindowSummary:
    suite: str
    slice: str | None  # None: the suite's every online score
    window: str
    count: int = 0  # completed scores (with a total)
    failed: int = 0  # failed or timed out: no total
    passed: int = 0
    total: Distribution = Distribution(None, None, None)
    components: dict[str, Distribution] = field(default_factory=dict)

    @property
    def pass_rate(self) -> float | None:
        return round(self.passed / self.count, 6) if self.count else None


def _percentiles(session: Session, column: Any) -> list[Any]:
    if session.get_bind().dialect.name == "postgresql":
        return [
            func.avg(column),
            func.percentile_cont(0.5).within_group(column),
            func.percentile_cont(0.9).within_group(column),
        ]
    return []


def _interpolated(values: Sequence[float], q: float) -> float:
    """``percentile_cont``'s linear interpolation."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _distribution(row: Any, values: Sequence[float] | None) -> Distribution:
    if values is not None:  # SQLite: computed here
        if not values:
            return Distribution(None, None, None)
        return Distribution(
            round(statistics.fmean(values), 6), round(_interpolated(values, 0.5), 6), round(_interpolated(values, 0.9), 6)
        )
    mean, p50, p90 = row
    return Distribution(*(round(float(v), 6) if v is not None else None for v in (mean, p50, p90)))


def summaries(session: Session, now: datetime, window: str, suite: str | None = None) -> list[WindowSummary]:
    """Each suite's window, overall then per slice (busiest first)."""
    since = now - WINDOWS[window]
    found: dict[tuple[str, str | None], WindowSummary] = {}
    for by_slice in (False, True):
        keys = [OnlineScore.suite_name, OnlineScore.slice] if by_slice else [OnlineScore.suite_name]
        scope = [Score.completed_at > since, Score.completed_at <= now, Score.status.in_(OUTCOMES)]
        if suite is not None:
            scope.append(OnlineScore.suite_name == suite)
        if by_slice:
            scope.append(OnlineScore.slice.is_not(None))
        ok = Score.status == "completed"
        sql_stats = _percentiles(session, Score.total)
        query = (
            select(
                *keys,
                func.count().filter(ok),
                func.count().filter(~ok),
                func.coalesce(func.sum(cast(case((ok & Score.passed.is_(True), 1), else_=0), Integer)), 0),
                *sql_stats,
            )
            .join(OnlineScore, OnlineScore.score_id == Score.id)
            .where(*scope)
            .group_by(*keys)
        )
        totals = None if sql_stats else _values(session, keys, Score.total, scope)
        for row in session.execute(query):
            key = (row[0], row[1] if by_slice else None)
            count, failed, passed = row[len(keys)], row[len(keys) + 1], row[len(keys) + 2]
            summary = WindowSummary(suite=key[0], slice=key[1], window=window, count=int(count), failed=int(failed), passed=int(passed))
            summary.total = _distribution(row[len(keys) + 3 :], None if totals is None else totals.get(tuple(row[: len(keys)]), []))
            found[key] = summary
        component_stats = _percentiles(session, ScoreComponent.score)
        ckeys = [*keys, ScoreComponent.component]
        cscope = [*scope, Score.status == "completed", ScoreComponent.score.is_not(None)]
        components = (
            select(*ckeys, *component_stats)
            .select_from(Score)
            .join(OnlineScore, OnlineScore.score_id == Score.id)
            .join(ScoreComponent, ScoreComponent.score_id == Score.id)
            .where(*cscope)
            .group_by(*ckeys)
        )
        values = None if component_stats else _values(session, ckeys, ScoreComponent.score, cscope, join_components=True)
        for row in session.execute(components):
            key = (row[0], row[1] if by_slice else None)
            name = row[len(keys)]
            summary = found.get(key)
            if summary is not None:
                summary.components[name] = _distribution(
                    row[len(ckeys) :], None if values is None else values.get(tuple(row[: len(ckeys)]), [])
                )
    return sorted(found.values(), key=lambda s: (s.suite, s.slice is not None, -s.count, s.slice or ""))


def _values(
    session: Session, keys: list[Any], column: Any, scope: list[Any], *, join_components: bool = False
) -> dict[tuple[Any, ...], list[float]]:
    """The values themselves, grouped by ``keys``, for SQLite (which has no percentile_cont)."""
    query = select(*keys, column).select_from(Score).join(OnlineScore, OnlineScore.score_id == Score.id)
    if join_components:
        query = query.join(ScoreComponent, ScoreComponent.score_id == Score.id)
    grouped: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for row in session.execute(query.where(*scope, column.is_not(None))):
        *key, value = row
        grouped[tuple(key)].append(float(value))
    return grouped


@dataclass(frozen=True)
class Bucket:
    start: datetime
    end: datetime
    count: int
    passed: int

    @property
    def pass_rate(self) -> float | None:
        return round(self.passed / self.count, 6) if self.count else None


def series(session: Session, now: datetime, window: str, suite: str) -> list[Bucket]:
    """The window's buckets, oldest first, every bucket present (an empty one has count 0)."""
    step = BUCKETS[window]
    first = now - WINDOWS[window]
    n = int(WINDOWS[window] / step)
    scope = (
        OnlineScore.suite_name == suite,
        Score.status == "completed",
        Score.completed_at > first,
        Score.completed_at <= now,
    )
    counts = [0] * n
    passed = [0] * n
    if session.get_bind().dialect.name == "postgresql":
        # width_bucket counts 1..n over [first, now); a score finished at exactly ``now`` is n + 1.
        index = func.least(
            func.width_bucket(func.extract("epoch", Score.completed_at), first.timestamp(), now.timestamp(), n), n
        )
        rows = session.execute(
            select(index, func.count(), func.count().filter(Score.passed.is_(True)))
            .join(OnlineScore, OnlineScore.score_id == Score.id)
            .where(*scope)
            .group_by(index)
        )
        for bucket, count, did_pass in rows:
            counts[int(bucket) - 1] += int(count)
            passed[int(bucket) - 1] += int(did_pass)
    else:
        for completed_at, did_pass in session.execute(
            select(Score.completed_at, Score.passed).join(OnlineScore, OnlineScore.score_id == Score.id).where(*scope)
        ):
            at = completed_at if completed_at.tzinfo else completed_at.replace(tzinfo=timezone.utc)
            i = min(int((at - first) / step), n - 1)
            counts[i] += 1
            passed[i] += 1 if did_pass else 0
    return [Bucket(first + step * i, first + step * (i + 1), counts[i], passed[i]) for i in range(n)]
