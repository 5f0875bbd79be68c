"""Online results over time: the rolling windows, a suite's series, and the online scores of a span of time."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import AwareDatetime, BaseModel, Field
from sqlalchemy import select

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.scoring.errors import BadRequest
from assay.scoring.online import windows
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score, utcnow
from assay.scoring.store.online_models import OnlineScore

router = APIRouter(prefix="/api/v1/online", tags=["online"], route_class=StrictJsonRoute)

Window = Literal["5m", "1h", "1d"]
MAX_SCORES = 500


class DistributionOut(BaseModel):
    mean: float | None
    p50: float | None
    p90: float | None


class WindowOut(BaseModel):
    suite: str
    slice: str | None = Field(description="The value of the rule's slice_by attribute; null: every online score of the suite.")
    window: Window
    count: int = Field(description="Online scores completed in the window (each has a total).")
    failed: int = Field(description="Online scores failed or timed out in the window (no total).")
    passed: int
    pass_rate: float | None
    total: DistributionOut
    components: dict[str, DistributionOut]


class WindowsOut(BaseModel):
    now: datetime
    windows: list[WindowOut]


class BucketOut(BaseModel):
    start: datetime
    end: datetime
    count: int
    passed: int
    pass_rate: float | None


class SeriesOut(BaseModel):
    suite: str
    window: Window
    buckets: list[BucketOut]


class OnlineScoreOut(BaseModel):
    score_id: uuid.UUID
    item_id: uuid.UUID
    rule: str
    trace_id: str
    span_id: str | None
    slice: str | None
    status: str
    total: float | None
    passed: bool | None
    completed_at: datetime | None


class OnlineScoresOut(BaseModel):
    suite: str
    scores: list[OnlineScoreOut]
    truncated: bool = Field(description="More scores finished in the span than the MAX_SCORES listed (the latest).")


def _window_out(summary: windows.WindowSummary) -> WindowOut:
    return WindowOut(
        suite=summary.suite, slice=summary.slice, window=summary.window, count=summary.count, failed=summary.failed,
        passed=summary.passed, pass_rate=summary.pass_rate, total=DistributionOut(**vars(summary.total)),
        components={name: DistributionOut(**vars(d)) for name, d in summary.components.items()},
    )


@router.get(
    "/windows",
    summary="Rolling windows of online scores",
    description="Per suite, overall and per slice: count, pass rate, mean/p50/p90 of the total and of each component, "
    "over the online scores that finished in the window ending now.",
)
def online_windows(
    _: Annotated[Principal, Depends(require_principal)],
    window: Annotated[Window, Query(description="5m, 1h or 1d")] = "1h",
    suite: Annotated[str | None, Query(max_length=100, description="Only this suite")] = None,
) -> WindowsOut:
    now = utcnow()
    with transaction() as session:
        found = windows.summaries(session, now, window, suite)
    return WindowsOut(now=now, windows=[_window_out(s) for s in found])


@router.get(
    "/suites/{suite}/series",
    summary="A suite's online pass rate over time",
    description="The window cut into buckets (30 s for 5m, 5 min for 1h, 1 h for 1d), oldest first, each with its count and pass rate.",
)
def online_series(
    suite: str, _: Annotated[Principal, Depends(require_principal)], window: Annotated[Window, Query()] = "1h"
) -> SeriesOut:
    with transaction() as session:
        buckets = windows.series(session, utcnow(), window, suite)
    return SeriesOut(
        suite=suite, window=window,
        buckets=[BucketOut(start=b.start, end=b.end, count=b.count, passed=b.passed, pass_rate=b.pass_rate) for b in buckets],
    )


def scores_between(suite: str, since: datetime, until: datetime) -> OnlineScoresOut:
    """The suite's online scores that finished in ``(since, until]``, latest first (what a chart point links to)."""
    if until <= since:
        raise BadRequest("until must be after since", since=since.isoformat(), until=until.isoformat())
    with transaction() as session:
        rows = session.execute(
            select(OnlineScore, Score.status, Score.total, Score.passed, Score.completed_at)
            .join(Score, Score.id == OnlineScore.score_id)
            .where(OnlineScore.suite_name == suite, Score.completed_at > since, Score.completed_at <= until)
            .order_by(Score.completed_at.desc())
            .limit(MAX_SCORES + 1)
        ).all()
    return OnlineScoresOut(
        suite=suite,
        truncated=len(rows) > MAX_SCORES,
        scores=[
            OnlineScoreOut(
                score_id=link.score_id, item_id=link.item_id, rule=link.rule, trace_id=link.trace_id, span_id=link.span_id,
                slice=link.slice, status=status, total=total, passed=passed, completed_at=completed_at,
            )
            for link, status, total, passed, completed_at in rows[:MAX_SCORES]
        ],
    )


@router.get(
    "/suites/{suite}/scores",
    summary="A suite's online scores finished in a span of time",
    description=f"Latest first, at most {MAX_SCORES}; each names its trace and span ids, its rule and slice.",
)
def online_scores(
    suite: str,
    _: Annotated[Principal, Depends(require_principal)],
    since: Annotated[AwareDatetime, Query(description="Exclusive start (ISO 8601 with a time zone)")],
    until: Annotated[AwareDatetime, Query(description="Inclusive end (ISO 8601 with a time zone)")],
) -> OnlineScoresOut:
    return scores_between(suite, since, until)
