"""Comparing two batches, and gating one against the other: thin adapters over
``assay.scoring.trust.compare`` and ``assay.scoring.trust.gate``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from assay.api.auth import Principal, require_principal
from assay.api.errors import ProblemText
from assay.api.json_body import StrictJsonRoute
from assay.api.schemas import SliceOut
from assay.scoring import slices as slicing
from assay.scoring.reports.csv_writer import csv_chunks
from assay.scoring.store.db import new_session, transaction
from assay.scoring.trust import compare as svc
from assay.scoring.trust import gate, stats
from assay.scoring.trust.noise import NoiseFloor

router = APIRouter(prefix="/api/v1", tags=["compare"], route_class=StrictJsonRoute)

COMPARE_DOC = f"""Compare batch `b` against batch `a`, pair by pair: every difference is **B − A**.

Items are matched by external id; each batch's **own** scores count (not each item's latest), and
calibration repeats never do. A score is usable when it is `completed` and not `partial`; partial,
failed (or timed out), pending (or in progress) and cancelled scores are counted apart per batch, and a
matched pair with an unusable side is *excluded* from the statistics. Items in one batch only are
counted and the first {svc.LIST_LIMIT} listed; items without an external id, or whose id repeats inside
a batch, are counted apart (never guessed).

JSON (default): for the total, the pass rate and each component both criteria share, the paired mean
difference with a bootstrap 95 % interval (percentile method, fixed seed: the same scores always give
the same interval; up to {stats.MAX_RESAMPLES} resamples, fewer past {stats.MAX_RESAMPLED_VALUES:,}
resampled values; no interval under 2 pairs, a zero-width one when every pair moved alike); wins, ties
and losses; McNemar's exact test on the discordant pass/fail pairs; the {svc.LIST_LIMIT} items that moved
most and the flipped ones. Beside every mean difference of a total or a component stands the judge's
noise floor over those n pairs — 1.96·σw·√(2/n) under one criteria hash, 1.96·√((σ1² + σ2²)/n) across
two, from the latest calibration (`assay calibrate`) — or the note "{stats.NO_NOISE_FLOOR}"; a listed item is
flagged `beyond_noise` when its change exceeds 1.96·σw·√2 (1.96·√(σ1² + σ2²)). Batches under different
criteria hashes or suites get a warning. Reports are cached per pair of batches and their completion
state, so a running batch is recomputed as its scores land.

With `by=metadata.KEY` the paired pairs are also split by the value of `KEY` in the metadata of
batch b's item, and each slice gets its total and pass-rate differences with their intervals, the noise
floor, wins / ties / losses and McNemar's test (`slices`). The {slicing.MAX_SLICES} largest slices are kept
apart, the rest grouped as `other`; a slice under {slicing.MIN_SLICE_ITEMS} pairs is flagged `small: true`;
a key holding objects or arrays is refused with 400.

`format=csv` streams every pair instead (by external id), then the items that could not be paired, with
the columns `{", ".join(svc.CSV_COLUMNS)}`; `match` is one of `paired`, `excluded`, `only in a`,
`only in b`, `no external id`, `repeated external id`."""


class MeanDifferenceOut(BaseModel):
    name: str = Field(..., description="'total', 'pass_rate' or a component name")
    n: int = Field(..., description="Pairs it is computed over")
    mean_a: float | None = Field(..., description="Mean under batch a over those pairs (pass rate: share passed)")
    mean_b: float | None = Field(..., description="Mean under batch b over those pairs")
    mean_difference: float | None = Field(..., description="Mean of b − a")
    ci_low: float | None = Field(..., description="Bootstrap 95 % interval, low end (null under 2 pairs)")
    ci_high: float | None = Field(..., description="Bootstrap 95 % interval, high end")
    resamples: int = Field(..., description="Bootstrap resamples drawn (0 when none were needed)")
    interval_note: str | None = Field(..., description="Why there is no interval, or why it has zero width")
    noise_floor: float | None = Field(..., description="The judge's noise floor over n pairs (null when not measured)")
    beyond_noise: bool | None = Field(..., description="|mean_difference| > noise_floor")
    noise_note: str | None = Field(..., description="'no noise floor measured' when a total or component has none")


class McNemarOut(BaseModel):
    pass_to_fail: int = Field(..., description="Pairs passing under a and failing under b")
    fail_to_pass: int = Field(..., description="Pairs failing under a and passing under b")
    p_value: float = Field(..., description="Exact two-sided McNemar p-value (binomial on the discordant pairs)")


class NoiseOut(BaseModel):
    calibration_run_id: uuid.UUID
    sigma_w_total: float | None = Field(..., description="Pooled within-item standard deviation of the total")
    sigma_w: dict[str, float | None] = Field(..., description="σw per judge component")
    flip_share: float | None = Field(..., description="Share of calibrated items whose pass/fail flipped between repeats")
    items: int
    repeats: int
    computed_at: datetime


class SideCountsOut(BaseModel):
    scores: int
    usable: int = Field(..., description="completed and not partial")
    partial: int
    failed: int = Field(..., description="failed or timed out")
    pending: int = Field(..., description="pending or in progress")
    cancelled: int
    no_external_id: int
    repeated_external_id: int = Field(..., description="Scores whose external id repeats inside the batch")
    only_here: int = Field(..., description="External ids the other batch lacks")


class SideOut(BaseModel):
    batch_id: uuid.UUID
    suite: str
    criteria_hash: str
    status: str
    counts: SideCountsOut
    only_here: list[str] = Field(..., description=f"The first {svc.LIST_LIMIT} external ids only this batch has")
    noise: NoiseOut | None = Field(..., description="The latest calibration of this batch's criteria hash")


class PairOut(BaseModel):
    external_id: str
    a_item_id: uuid.UUID
    b_item_id: uuid.UUID
    a_total: float
    b_total: float
    delta: float = Field(..., description="b_total − a_total")
    a_passed: bool
    b_passed: bool
    flip: Literal["pass→fail", "fail→pass"] | None
    beyond_noise: bool | None = Field(..., description="|delta| above the per-item noise floor (null: not measured)")


class SliceComparisonOut(BaseModel):
    slice: SliceOut = Field(..., description="The slice; its n is the pairs in it")
    total: MeanDifferenceOut
    wins: int
    ties: int
    losses: int
    pass_rate: MeanDifferenceOut
    mcnemar: McNemarOut


class ComparisonOut(BaseModel):
    a: SideOut
    b: SideOut
    warnings: list[str]
    matched: int = Field(..., description="External ids in both batches")
    paired: int = Field(..., description="Matched pairs usable on both sides: the n of the statistics")
    excluded: int = Field(..., description="Matched pairs left out (a side partial, failed, pending or cancelled)")
    total: MeanDifferenceOut
    wins: int = Field(..., description="Pairs where b's total is higher")
    ties: int
    losses: int = Field(..., description="Pairs where b's total is lower")
    pass_rate: MeanDifferenceOut
    mcnemar: McNemarOut
    components: list[MeanDifferenceOut] = Field(..., description="Each component both criteria share")
    components_only_a: list[str]
    components_only_b: list[str]
    item_noise_floor: float | None = Field(..., description="A listed item's |delta| above it is beyond the judge's noise")
    moved_most: list[PairOut] = Field(..., description=f"The {svc.LIST_LIMIT} pairs with the largest |delta|")
    flipped: list[PairOut] = Field(..., description=f"The first {svc.LIST_LIMIT} pairs whose verdict changed, by external id")
    by: str | None = Field(None, description="The metadata key the pairs are sliced by (by=metadata.KEY)")
    slices: list[SliceComparisonOut] | None = Field(
        None, description="With by: each slice of the paired pairs, largest first, then 'missing', then 'other'"
    )


def mean_difference_out(shift: svc.Shift) -> MeanDifferenceOut:
    d = shift.difference
    return MeanDifferenceOut(
        name=shift.name, n=shift.n, mean_a=shift.mean_a, mean_b=shift.mean_b, mean_difference=d.mean,
        ci_low=d.ci_low, ci_high=d.ci_high, resamples=d.resamples, interval_note=d.note,
        noise_floor=shift.noise_floor, beyond_noise=shift.beyond_noise, noise_note=shift.noise_note,
    )


def noise_out(noise: NoiseFloor | None) -> NoiseOut | None:
    if noise is None:
        return None
    return NoiseOut(
        calibration_run_id=noise.run_id,
        sigma_w_total=noise.total,
        sigma_w={k: v for k, v in noise.sigma_w.items() if k != svc.TOTAL},
        flip_share=noise.flip_share,
        items=noise.items,
        repeats=noise.repeats,
        computed_at=noise.computed_at,
    )


def _side(side: svc.Side) -> SideOut:
    return SideOut(
        batch_id=side.batch_id, suite=side.suite, criteria_hash=side.criteria_hash, status=side.status,
        counts=SideCountsOut(**vars(side.counts)), only_here=side.only_here_ids, noise=noise_out(side.noise),
    )


def mcnemar_out(m: stats.McNemar) -> McNemarOut:
    return McNemarOut(pass_to_fail=m.pass_to_fail, fail_to_pass=m.fail_to_pass, p_value=m.p_value)


def slice_out(s: svc.SliceShift) -> SliceComparisonOut:
    return SliceComparisonOut(
        slice=SliceOut(**s.slice), total=mean_difference_out(s.total), wins=s.tally.wins, ties=s.tally.ties,
        losses=s.tally.losses, pass_rate=mean_difference_out(s.pass_rate), mcnemar=mcnemar_out(s.mcnemar),
    )


def comparison_out(result: svc.Comparison) -> ComparisonOut:
    return ComparisonOut(
        a=_side(result.a),
        b=_side(result.b),
        warnings=result.warnings,
        matched=result.matched,
        paired=result.paired,
        excluded=result.excluded,
        total=mean_difference_out(result.total),
        wins=result.tally.wins,
        ties=result.tally.ties,
        losses=result.tally.losses,
        pass_rate=mean_difference_out(result.pass_rate),
        mcnemar=mcnemar_out(result.mcnemar),
        components=[mean_difference_out(c) for c in result.components],
        components_only_a=result.components_only_a,
        components_only_b=result.components_only_b,
        item_noise_floor=result.item_noise_floor,
        moved_most=[PairOut(**vars(r)) for r in result.moved_most],
        flipped=[PairOut(**vars(r)) for r in result.flipped],
        by=result.by,
        slices=None if result.slices is None else [slice_out(s) for s in result.slices],
    )


@router.get(
    "/compare",
    response_model=ComparisonOut,
    summary="Compare two batches pair by pair, with intervals, McNemar and the noise floor; or every pair as CSV",
    description=COMPARE_DOC,
    responses={
        200: {"content": {"text/csv": {}}},
        400: {"description": "The same batch twice; by is not metadata.KEY or the key holds objects or arrays"},
        404: {"description": "No such batch"},
    },
)
def compare_batches(
    _: Annotated[Principal, Depends(require_principal)],
    a: Annotated[uuid.UUID, Query(description="The baseline batch id")],
    b: Annotated[uuid.UUID, Query(description="The batch compared against it")],
    format: Annotated[Literal["json", "csv"], Query(description="json: the report; csv: every pair")] = "json",
    by: Annotated[
        str | None, Query(max_length=120, description="metadata.KEY: also report each slice of the pairs (json only)")
    ] = None,
) -> Any:
    with transaction() as session:
        if format == "json":
            return comparison_out(svc.compare_batches(session, a, b, by))
        # Checked before the stream starts, so a missing batch is still a 404, not a broken download.
        batch_a, batch_b = svc.load_batches(session, a, b)
        item_floor = svc.item_floor_for(session, batch_a, batch_b)
    return StreamingResponse(
        pairs_csv(a, b, item_floor),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="compare-{str(a)[:8]}-{str(b)[:8]}.csv"'},
    )


def pairs_csv(a: uuid.UUID, b: uuid.UUID, item_floor: float | None) -> Iterator[str]:
    """Every pair as CSV chunks, in a session of its own (``assay compare --csv`` on the embedded store too)."""
    session = new_session()
    try:
        yield from csv_chunks(svc.iter_pairs(session, a, b, item_floor=item_floor), svc.CSV_COLUMNS, rows_per_chunk=1000)
    finally:
        session.close()


# --- the gate -------------------------------------------------------------------------------------

GATE_DOC = """Gate batch `candidate` against batch `baseline`: does the candidate regress beyond the judge's noise?

Items are paired by external id. The gate **fails** when McNemar's exact p < `alpha` with more
pass→fail than fail→pass pairs (rule `mcnemar`), or when the upper end of the paired bootstrap 95 %
interval of the mean total difference (candidate − baseline) is below −`max_drop` (rule `max_drop`) —
and, when the judge's noise was measured for the criteria hash (`assay calibrate`), only when the drop
exceeds the noise floor over those pairs. Errored, failed and partial candidate items count as
failures; baseline items that are not usable leave their pair out. It never passes on nothing:
unfinished items (`incomplete`), different criteria hashes (`criteria_hash`) and fewer than
`min_pairs` pairs (`too_few_pairs`) fail with the reason. With `by=metadata.KEY`, each slice of at
least `min_pairs` pairs is gated too, McNemar's p-values Holm-corrected across slices and each slice's
interval widened to 1 − 0.05/m; smaller slices are listed and flagged, not gated.

`failures` names each rule that failed; `failing_items` lists every candidate item that did not pass,
with the reason (the CLI's `--junit` writes them as test cases)."""


class GateFailureOut(BaseModel):
    rule: Literal["incomplete", "criteria_hash", "too_few_pairs", "mcnemar", "max_drop"]
    message: ProblemText


class GateVerdictsOut(BaseModel):
    pairs: int
    baseline_pass_rate: float | None
    candidate_pass_rate: float | None
    mean_difference: float | None = Field(..., description="Mean of candidate − baseline totals")
    ci_low: float | None
    ci_high: float | None
    confidence: float = Field(..., description="The interval's level (widened per slice)")
    pass_to_fail: int
    fail_to_pass: int
    p_value: float = Field(..., description="McNemar's exact two-sided p-value")
    adjusted_alpha: float = Field(..., description="The α the p-value is held to (Holm's level for a slice; 0: Holm stopped)")
    noise_floor: float | None = Field(..., description="The judge's noise floor of the mean over these pairs (null: not measured)")
    passed: bool
    failures: list[GateFailureOut]
    notes: list[str] = Field(..., description="A regression the noise floor explains is passed and said here")


class GateSliceOut(GateVerdictsOut):
    name: str
    gated: bool = Field(..., description="False: fewer pairs than min_pairs, flagged rather than gated")


class GateItemOut(BaseModel):
    external_id: str | None
    passed: bool
    reason: ProblemText | None


class GateOptionsOut(BaseModel):
    alpha: float
    max_drop: float
    min_pairs: int
    by: str | None


class GateOut(BaseModel):
    passed: bool
    failures: list[GateFailureOut] = Field(..., description="Every rule that failed, the slices' included")
    baseline: str
    candidate: str
    criteria_hash: str | None = Field(..., description="The shared criteria hash (null when they differ)")
    options: GateOptionsOut
    counts: dict[str, int]
    overall: GateVerdictsOut
    slices: list[GateSliceOut]
    failing_items: list[GateItemOut]


@router.get(
    "/gate",
    response_model=GateOut,
    summary="Gate a candidate batch against a baseline: McNemar, the mean difference's interval, the noise floor",
    description=GATE_DOC,
    responses={400: {"description": "The same batch twice, or a bad option"}, 404: {"description": "No such batch"}},
)
def gate_batches(
    _: Annotated[Principal, Depends(require_principal)],
    baseline: Annotated[uuid.UUID, Query(description="The baseline batch id")],
    candidate: Annotated[uuid.UUID, Query(description="The candidate batch id")],
    alpha: Annotated[float, Query(gt=0, lt=1, description="McNemar's significance level")] = gate.DEFAULT_ALPHA,
    max_drop: Annotated[float, Query(ge=0, le=1, description="The mean total drop tolerated (D)")] = gate.DEFAULT_MAX_DROP,
    min_pairs: Annotated[int, Query(ge=1, le=1_000_000, description="Fewer pairs fail the gate")] = gate.DEFAULT_MIN_PAIRS,
    by: Annotated[str | None, Query(description="metadata.KEY: gate each slice too (Holm-corrected)")] = None,
) -> Any:
    options = gate.GateOptions(alpha=alpha, max_drop=max_drop, min_pairs=min_pairs, by=by)
    with transaction() as session:
        return gate.gate_batches(session, baseline, candidate, options).to_dict()
