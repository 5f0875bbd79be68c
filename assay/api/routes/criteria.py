"""Comparing criteria: a thin adapter over ``assay.scoring.rescoring.diff``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.params import Offset
from assay.api.routes.compare import NoiseOut, noise_out
from assay.scoring.reports.csv_writer import csv_chunks
from assay.scoring.rescoring import diff as svc
from assay.scoring.store.db import new_session, transaction
from assay.scoring.trust import LIST_LIMIT, stats

router = APIRouter(prefix="/api/v1/criteria", tags=["items and criteria"], route_class=StrictJsonRoute)

CSV_COLUMNS = ["item_id", "external_id", "old_total", "new_total", "delta", "old_passed", "new_passed", "flip", "beyond_noise"]

DIFF_DOC = """Compare the scores of two criteria hashes over the items scored under **both**. For each such
item the latest `completed` score under each hash counts (by completion time); failed, pending and
cancelled scores are ignored. `from` and `to` take a full hash or a unique prefix of at least 8 hex
characters (an ambiguous prefix is a 400). `suite` restricts both sides to that suite's scores.

JSON (default): the aggregates (items compared and only under one side, mean totals and delta,
pass→fail and fail→pass flips, mean shift per component the two criteria share, cost) and one page
of per-item rows, largest |delta| first (`order=item`: by item id). The mean delta and each component
shift carry a paired bootstrap 95 % interval (fixed seed; none under 2 items, zero-width when every
item moved alike), the flips McNemar's exact test, the deltas wins / ties / losses; beside each mean
stands the judge's noise floor across the two hashes, 1.96·√((σ1² + σ2²)/n) from each hash's latest
calibration, or "no noise floor measured"; an item is `beyond_noise` when |delta| > 1.96·√(σ1² + σ2²).
`format=csv` streams every compared item by item id instead, as an attachment with the columns
`item_id, external_id, old_total, new_total, delta, old_passed, new_passed, flip, beyond_noise`;
`limit`, `offset` and `order` do not apply to it. `flips_only=true` keeps only flipped items in
either form."""

# Full hashes or unique prefixes; the service says which prefix is unknown or ambiguous.
HASH_PARAM: dict[str, Any] = {"min_length": 8, "max_length": 64, "pattern": r"^[0-9a-fA-F]+$"}


class _FromService(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # built straight from the service's dataclasses


class DiffItemOut(_FromService):
    item_id: uuid.UUID
    external_id: str | None = Field(..., description="The item's own id, when it has one")
    old_total: float = Field(..., description="Total under `from`, in [0, 1]")
    new_total: float = Field(..., description="Total under `to`, in [0, 1]")
    delta: float = Field(..., description="new_total − old_total")
    old_passed: bool
    new_passed: bool
    flip: Literal["pass→fail", "fail→pass"] | None = Field(..., description="Set when the verdict changed")
    beyond_noise: bool | None = Field(..., description="|delta| above the per-item noise floor (null: not measured)")


class _IntervalAndNoise(BaseModel):
    ci_low: float | None = Field(..., description="Bootstrap 95 % interval of the mean, low end (null under 2 items)")
    ci_high: float | None = Field(..., description="Bootstrap 95 % interval of the mean, high end")
    interval_note: str | None = Field(..., description="Why there is no interval, or why it has zero width")
    noise_floor: float | None = Field(..., description="The judge's noise floor over n items (null when not measured)")
    beyond_noise: bool | None = Field(..., description="|mean| > noise_floor")
    noise_note: str | None = Field(..., description="'no noise floor measured' when there is none")


def _interval_and_noise(interval: stats.MeanDifference, noise: svc.NoiseBeside) -> dict[str, Any]:
    return {
        "ci_low": interval.ci_low, "ci_high": interval.ci_high, "interval_note": interval.note,
        "noise_floor": noise.noise_floor, "beyond_noise": noise.beyond_noise, "noise_note": noise.noise_note,
    }


class ComponentShiftOut(_IntervalAndNoise):
    component: str
    n: int = Field(..., description="Compared items where the component has a score under both hashes")
    mean_old: float | None = Field(..., description="Mean component score under `from` over those items")
    mean_new: float | None = Field(..., description="Mean component score under `to` over those items")
    mean_shift: float | None = Field(..., description="Mean of (score under `to` − score under `from`)")


class DiffSummaryOut(_IntervalAndNoise):
    items_compared: int = Field(..., description="Items with a completed score under both hashes")
    items_only_from: int = Field(..., description="Items with a completed score under `from` only")
    items_only_to: int = Field(..., description="Items with a completed score under `to` only")
    mean_old_total: float | None = Field(..., description="Mean total under `from` over the compared items")
    mean_new_total: float | None = Field(..., description="Mean total under `to` over the compared items")
    mean_delta: float | None = Field(..., description="Mean of new_total − old_total")
    pass_to_fail: int
    fail_to_pass: int
    cost_usd: float = Field(..., description="Cost of the compared scores under `to` (the new run)")
    cost_usd_from: float = Field(..., description="Cost of the same items' scores under `from`, for reference")
    components: list[ComponentShiftOut] = Field(..., description="Components present in both criteria")
    components_only_from: list[str] = Field(..., description="Components only the `from` criteria have")
    components_only_to: list[str] = Field(..., description="Components only the `to` criteria have")
    resamples: int = Field(..., description="Bootstrap resamples behind the mean delta's interval")
    wins: int = Field(..., description="Items whose total is higher under `to`")
    ties: int
    losses: int = Field(..., description="Items whose total is lower under `to`")
    mcnemar_p_value: float = Field(..., description="Exact two-sided McNemar p-value of the pass→fail / fail→pass flips")
    item_noise_floor: float | None = Field(..., description="An item's |delta| above it is beyond the judge's noise")
    noise_from: NoiseOut | None = Field(..., description="The latest calibration of the `from` hash")
    noise_to: NoiseOut | None = Field(..., description="The latest calibration of the `to` hash")


def _summary_out(s: svc.DiffSummary) -> DiffSummaryOut:
    return DiffSummaryOut(
        items_compared=s.items_compared, items_only_from=s.items_only_from, items_only_to=s.items_only_to,
        mean_old_total=s.mean_old_total, mean_new_total=s.mean_new_total, mean_delta=s.mean_delta,
        pass_to_fail=s.pass_to_fail, fail_to_pass=s.fail_to_pass, cost_usd=s.cost_usd, cost_usd_from=s.cost_usd_from,
        components=[
            ComponentShiftOut(
                component=c.component, n=c.n, mean_old=c.mean_old, mean_new=c.mean_new, mean_shift=c.mean_shift,
                **_interval_and_noise(c.interval, c.noise),
            )
            for c in s.components
        ],
        components_only_from=s.components_only_from,
        components_only_to=s.components_only_to,
        resamples=s.delta_interval.resamples,
        wins=s.tally.wins,
        ties=s.tally.ties,
        losses=s.tally.losses,
        mcnemar_p_value=s.mcnemar.p_value,
        item_noise_floor=s.item_noise_floor,
        noise_from=noise_out(s.noise_from),
        noise_to=noise_out(s.noise_to),
        **_interval_and_noise(s.delta_interval, s.noise),
    )


class CriteriaDiffOut(BaseModel):
    suite: str | None
    from_hash: str = Field(..., description="The full `from` hash")
    to_hash: str = Field(..., description="The full `to` hash")
    summary: DiffSummaryOut
    total: int = Field(..., description="Rows the page is taken from: items compared, or the flips with flips_only")
    limit: int
    offset: int
    items: list[DiffItemOut]
    criteria_change: dict[str, Any] = Field(
        ...,
        description="What changed from `from` to `to`: `threshold` and `fields` ({from, to} or null), "
        "`components_added`, `components_removed`, and per shared component its `changes` (weight, min_score, "
        "metric, version, args, the judge's provider, model and settings as {what, from, to}; the judge's "
        "rubric and prompt as {what, diff}, a unified diff); `changed` says whether anything did",
    )


def criteria_diff_out(result: svc.CriteriaDiff, limit: int, offset: int) -> CriteriaDiffOut:
    """The diff as the API answers it (``assay diff`` on the embedded store prints the same)."""
    return CriteriaDiffOut(
        suite=result.suite,
        from_hash=result.from_hash,
        to_hash=result.to_hash,
        summary=_summary_out(result.summary),
        total=result.total_rows,
        limit=limit,
        offset=offset,
        items=[DiffItemOut.model_validate(i) for i in result.items],
        criteria_change=result.criteria_change,
    )


@router.get(
    "/diff",
    response_model=CriteriaDiffOut,
    summary="Compare two criteria hashes item by item; or a streamed CSV with format=csv",
    description=DIFF_DOC,
    responses={
        200: {"content": {"text/csv": {}}},
        400: {"description": "Same hash twice, or an ambiguous prefix"},
        404: {"description": "No such criteria hash or suite"},
    },
)
def criteria_diff(
    _: Annotated[Principal, Depends(require_principal)],
    from_hash: Annotated[str, Query(alias="from", description="The old criteria hash (or a prefix)", **HASH_PARAM)],
    to_hash: Annotated[str, Query(alias="to", description="The new criteria hash (or a prefix)", **HASH_PARAM)],
    suite: Annotated[str | None, Query(min_length=1, max_length=100, description="Only this suite's scores")] = None,
    flips_only: Annotated[bool, Query(description="Only items whose verdict changed")] = False,
    order: Annotated[svc.DiffOrder, Query(description="delta: largest |delta| first; item: by item id")] = "delta",
    limit: Annotated[int, Query(ge=1, le=LIST_LIMIT, description=f"Rows per page, at most {LIST_LIMIT}")] = LIST_LIMIT,
    offset: Offset = 0,
    format: Annotated[Literal["json", "csv"], Query(description="json: aggregates and a page; csv: every row")] = "json",
) -> Any:
    with transaction() as session:
        if format == "json":
            result = svc.criteria_diff(
                session, suite=suite, from_hash=from_hash, to_hash=to_hash,
                limit=limit, offset=offset, order=order, flips_only=flips_only,
            )
            return criteria_diff_out(result, limit, offset)
        # Resolved before the stream starts, so an unknown hash is still a 404, not a broken download.
        old, new = svc.resolve_pair(session, suite=suite, from_hash=from_hash, to_hash=to_hash)
        full_from, full_to = old.criteria_hash, new.criteria_hash
        item_floor = svc.item_noise_floor(session, full_from, full_to)
    return StreamingResponse(
        diff_csv(suite, full_from, full_to, flips_only, item_floor),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="criteria-diff-{full_from[:12]}-{full_to[:12]}.csv"'},
    )


def diff_csv(suite: str | None, from_hash: str, to_hash: str, flips_only: bool, item_floor: float | None) -> Iterator[str]:
    """Every compared item as CSV chunks, in a session of its own (``assay diff --csv`` on the embedded store too)."""
    session = new_session()
    try:
        items = svc.iter_diff_items(
            session, suite=suite, from_hash=from_hash, to_hash=to_hash, flips_only=flips_only, item_floor=item_floor
        )
        rows = ({column: getattr(item, column) for column in CSV_COLUMNS} for item in items)
        yield from csv_chunks(rows, CSV_COLUMNS, rows_per_chunk=1000)
    finally:
        session.close()
