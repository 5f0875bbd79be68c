"""Calibration runs: judge a sample of a suite's stored items K times to measure the judge's noise.

``start`` picks the sample, creates a :class:`CalibrationRun` and the batch that carries its N×K
*calibration scores* (each names the run and its repeat, 1..K) under the suite's current criteria.
The batch is estimated, budgeted, laned and planned like any other batch; a worker's planner takes it
from there. Deterministic components may carry over from the item's latest machine score (their
result cannot change); judge components never do: every repeat is a new judge call, which is the
point (``pipeline.planning.plan_chunk`` reads the ``calibration`` marker of the batch's summary).

The sample is deterministic: the N items of the suite (an item belongs to it when it has a machine
score under it) whose SHA-256 of ``"<suite>:<item id>"`` is smallest, so the same suite and N pick the
same items every time, and a larger N extends a smaller one.

When the batch finishes (a batch-completed hook, ``pipeline.completion``), :func:`finish_run` stores the noise
estimates (:mod:`assay.scoring.trust.noise`) per judge component and for the total. Calibration scores sit
outside the one-active-score rule, never enter the review queue, and every reader of machine verdicts
leaves them out (:func:`assay.scoring.store.filters.machine_scores`).

Services flush; callers commit and then start the batch's planner.
"""

from __future__ import annotations

import hashlib
import heapq
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session, aliased

from assay.scoring.errors import BudgetRequired, InvalidInput, NotFound
from assay.scoring.pipeline.components import pending_score
from assay.scoring.pipeline.hooks import on_batch_completed
from assay.scoring.rescoring.rescore import Estimate, Lane, estimate
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.retention import keep_rule
from assay.scoring.store.models import (
    TOTAL_COMPONENT,
    Batch,
    CalibrationRun,
    Item,
    NoiseEstimate,
    Score,
    ScoreComponent,
    SuiteRecord,
    utcnow,
)
from assay.scoring.suites.criteria import current_suite, load_criteria
from assay.scoring.suites.loader import ModelCatalog
from assay.scoring.trust.noise import NoiseFloor, flip_share, latest_noise, noise_of_run, pooled_sigma
from assay.scoring.trust.runs import batch_fields, run_of_batch, start_run_batch

MAX_SAMPLE = 1000
MAX_REPEATS = 20
MIN_REPEATS = 2
# The summary key that makes a batch a calibration batch (judge components never carry over).
MARKER = "calibration"
# What a calibration without its own budget may spend (settings.calibration_max_usd).
CAP_SETTING = "ASSAY_CALIBRATION_MAX_USD"


@dataclass(frozen=True)
class CalibrationPlan:
    suite: str
    criteria_hash: str
    item_ids: list[uuid.UUID]
    repeats: int
    estimate: Estimate


def check_bounds(sample: int, repeats: int) -> None:
    if not 1 <= sample <= MAX_SAMPLE:
        raise InvalidInput(f"sample must be between 1 and {MAX_SAMPLE} items, got {sample}")
    if not MIN_REPEATS <= repeats <= MAX_REPEATS:
        raise InvalidInput(
            f"repeats must be between {MIN_REPEATS} and {MAX_REPEATS} (a spread needs two answers), got {repeats}"
        )


def sample_key(suite: str, item_id: uuid.UUID) -> str:
    return hashlib.sha256(f"{suite}:{item_id}".encode()).hexdigest()


def sample_items(session: Session, suite: str, n: int) -> list[uuid.UUID]:
    """The suite's N items with the smallest sample key (all of them when it has fewer), in key order."""
    mine = aliased(Score)
    ids = session.scalars(
        select(Item.id)
        .where(exists().where(mine.item_id == Item.id, mine.suite_name == suite, machine_scores(mine)))
        .execution_options(yield_per=5000)
    )
    return [item_id for _, item_id in heapq.nsmallest(n, ((sample_key(suite, i), i) for i in ids))]


def plan(session: Session, suite: str, sample: int, repeats: int, lane: Lane, catalog: ModelCatalog) -> CalibrationPlan:
    """What a calibration would judge and what it would cost (nothing is written)."""
    check_bounds(sample, repeats)
    record = current_suite(session, suite)  # 404 unknown, 409 disabled
    criteria = load_criteria(session, record.current_criteria_hash)
    if not criteria.judge_components:
        raise InvalidInput(
            f"suite {record.name!r} has no judge component: its deterministic components give the same "
            "score every time, so there is no judge noise to measure"
        )
    item_ids = sample_items(session, record.name, sample)
    if not item_ids:
        raise InvalidInput(f"suite {record.name!r} has no stored items to calibrate on; score some first")
    once = estimate(
        session, record.current_criteria_hash, record.name, Item.id.in_(item_ids), catalog, lane, carry_judges=False
    )
    total = Estimate(
        items=once.items,
        judge_calls=once.judge_calls * repeats,
        input_tokens=once.input_tokens * repeats,
        output_tokens=once.output_tokens * repeats,
        cost_usd=once.cost_usd * repeats,
        lane=lane,
        output_basis=once.output_basis,
        notes=[
            *once.notes,
            f"each of the {once.items} item(s) is judged {repeats} times: one call per judge component, item "
            "and repeat (a judge's answer never carries over in a calibration)",
        ],
        carried_over=0,
        by_provider={name: part.times(repeats) for name, part in once.by_provider.items()},
    )
    return CalibrationPlan(record.name, record.current_criteria_hash, item_ids, repeats, total)


def _over_cap(the_plan: CalibrationPlan, cap_usd: float) -> str | None:
    cost = the_plan.estimate.cost_usd
    if cost <= cap_usd:
        return None
    return (
        f"this calibration ({len(the_plan.item_ids)} item(s) × {the_plan.repeats} repeats) is estimated at "
        f"${cost:,.2f}, over the ${cap_usd:,.2f} a calibration may spend without a budget of its own "
        f"({CAP_SETTING}): pass budget_usd (assay calibrate --budget) to run it, or judge fewer items or repeats"
    )


def budget_note(the_plan: CalibrationPlan, budget_usd: float | None, cap_usd: float) -> str | None:
    """What a calibration without a budget gets (None when it has one): the cap as its budget, or a refusal."""
    if budget_usd is not None:
        return None
    refusal = _over_cap(the_plan, cap_usd)
    if refusal is not None:
        return f"refused without budget_usd: {refusal}"
    return f"without budget_usd, the run's budget is the ${cap_usd:,.2f} cap ({CAP_SETTING})"


def run_budget(the_plan: CalibrationPlan, budget_usd: float | None, cap_usd: float) -> float:
    """The spend limit of the run's batch: ``budget_usd`` when given, else the cap. N items × K repeats
    multiply fast (1000 × 20 is 20,000 judge calls), so a run estimated over the cap must ask for its
    spend: without a budget it is refused (422 ``budget_required``, naming the estimate and the cap)."""
    if budget_usd is not None:
        return budget_usd
    refusal = _over_cap(the_plan, cap_usd)
    if refusal is not None:
        raise BudgetRequired(
            refusal, estimate_usd=round(the_plan.estimate.cost_usd, 4), cap_usd=cap_usd, setting=CAP_SETTING
        )
    return cap_usd


def start(
    session: Session, the_plan: CalibrationPlan, *, created_by: str, lane: Lane, budget_usd: float | None
) -> CalibrationRun:
    """The run, its batch and its N×K pending calibration scores (item by item, repeats together, so
    a budget cut leaves whole items). The caller commits, then starts the batch's planner."""
    if budget_usd is not None and budget_usd <= 0:
        raise InvalidInput("budget_usd must be positive")
    criteria = load_criteria(session, the_plan.criteria_hash)
    now = utcnow()
    run = CalibrationRun(
        id=uuid.uuid4(),
        suite_name=the_plan.suite,
        criteria_hash=the_plan.criteria_hash,
        sample=len(the_plan.item_ids),
        repeats=the_plan.repeats,
        status="running",
        created_by=created_by[:255],
        created_at=now,
    )
    batch = start_run_batch(
        session,
        run,
        MARKER,
        suite_name=the_plan.suite,
        lane=lane,
        budget_usd=budget_usd,
        total_items=len(the_plan.item_ids) * the_plan.repeats,
        summary={"sample": run.sample, "repeats": run.repeats},
    )
    rows = []
    for index, item_id in enumerate(the_plan.item_ids):
        for repeat in range(1, the_plan.repeats + 1):
            row = pending_score(
                item_id=item_id,
                suite=the_plan.suite,
                criteria_hash=the_plan.criteria_hash,
                criteria=criteria,
                triggered_by=created_by,
                created_at=now,
                batch_id=batch.id,
                position=index * the_plan.repeats + repeat,
            )
            rows.append({**row, "calibration_run_id": run.id, "calibration_repeat": repeat})
    session.execute(dialect_insert(session)(Score).on_conflict_do_nothing(), rows)
    session.flush()
    return run


# --- the estimate when the batch is done -----------------------------------------------------------------


def compute_noise(session: Session, run: CalibrationRun) -> list[NoiseEstimate]:
    """σw per judge component and for the total, and the flip share, from the run's repeats."""
    criteria = load_criteria(session, run.criteria_hash)
    judges = criteria.judged_rows  # each judge component; a jury's members and its aggregate each
    by_component: dict[str, dict[uuid.UUID, list[float]]] = {name: defaultdict(list) for name in judges}
    for item_id, component, value in session.execute(
        select(Score.item_id, ScoreComponent.component, ScoreComponent.score)
        .join(ScoreComponent, ScoreComponent.score_id == Score.id)
        .where(
            Score.calibration_run_id == run.id,
            ScoreComponent.component.in_(judges),
            ScoreComponent.status == "ok",
            ScoreComponent.score.is_not(None),
        )
    ):
        by_component[component][item_id].append(value)
    totals: dict[uuid.UUID, list[float]] = defaultdict(list)
    verdicts: dict[uuid.UUID, list[bool]] = defaultdict(list)
    for item_id, total, passed in session.execute(
        select(Score.item_id, Score.total, Score.passed).where(
            Score.calibration_run_id == run.id, Score.status == "completed", Score.total.is_not(None)
        )
    ):
        totals[item_id].append(total)
        verdicts[item_id].append(bool(passed))
    now = utcnow()

    def row(component: str, sigma: float | None, items: int, flips: float | None = None) -> NoiseEstimate:
        return NoiseEstimate(
            calibration_run_id=run.id,
            component=component,
            criteria_hash=run.criteria_hash,
            suite_name=run.suite_name,
            sigma_w=sigma,
            items=items,
            repeats=run.repeats,
            flip_share=flips,
            computed_at=now,
        )

    out = []
    for name in judges:
        pooled = pooled_sigma(by_component[name])
        out.append(row(name, pooled.sigma_w, pooled.items))
    pooled_total = pooled_sigma(totals)
    share, _ = flip_share(verdicts)
    out.append(row(TOTAL_COMPONENT, pooled_total.sigma_w, pooled_total.items, share))
    return out


@keep_rule
def calibration_scores() -> Any:
    """Retention never removes a calibration repeat: the noise estimates stand on them."""
    return select(Score.id).where(Score.calibration_run_id.is_not(None))


@on_batch_completed
def batch_completed(session: Session, batch: Batch) -> None:
    """A batch completed: if it carries a calibration run, store that run's noise estimates."""
    if MARKER in (batch.summary or {}):
        finish_run(session, batch)


def finish_run(session: Session, batch: Batch) -> None:
    """The run's batch finished (again, after a retry or resume): store its estimates afresh. A
    budget cut still yields estimates over the items that got two usable repeats; a cancelled batch
    ends the run without any."""
    found = run_of_batch(session, batch, MARKER, CalibrationRun)
    if found is None:
        return
    run, status = found
    session.execute(delete(NoiseEstimate).where(NoiseEstimate.calibration_run_id == run.id))
    if status == "completed":
        session.add_all(compute_noise(session, run))
    run.status = status
    run.completed_at = utcnow()
    session.flush()


# --- reading -------------------------------------------------------------------------------------------


def get_run(session: Session, suite: str, run_id: uuid.UUID) -> CalibrationRun:
    run = session.get(CalibrationRun, run_id)
    if run is None or run.suite_name != suite:
        raise NotFound(f"no calibration run {run_id} of suite {suite!r}")
    return run


def run_view(session: Session, run: CalibrationRun) -> dict[str, Any]:
    noise: NoiseFloor | None = noise_of_run(session, run.id)
    return {
        "id": str(run.id),
        "suite": run.suite_name,
        "criteria_hash": run.criteria_hash,
        "sample": run.sample,
        "repeats": run.repeats,
        **batch_fields(session, run),
        "noise": noise.to_dict() if noise is not None else None,
    }


def suite_noise(session: Session, suite: str, criteria_hash: str | None = None) -> list[NoiseFloor]:
    """The latest stored noise floor of each criteria hash of a suite (or of the one asked for)."""
    query = select(NoiseEstimate.criteria_hash).where(
        NoiseEstimate.suite_name == suite, NoiseEstimate.component == TOTAL_COMPONENT
    )
    if criteria_hash is not None:
        query = query.where(NoiseEstimate.criteria_hash == criteria_hash)
    hashes = session.scalars(query.group_by(NoiseEstimate.criteria_hash)).all()
    floors = [floor for h in hashes if (floor := latest_noise(session, h)) is not None]
    return sorted(floors, key=lambda f: f.computed_at, reverse=True)


def noise_report(session: Session, suite: str, criteria_hash: str | None = None) -> dict[str, Any]:
    """What ``GET /api/v1/suites/{name}/noise`` and ``assay noise`` show: the suite's current hash and
    the latest noise floor of each of its criteria hashes, or a note when none was measured."""
    record = session.get(SuiteRecord, suite)
    if record is None:
        current_suite(session, suite)  # the 404 naming the available suites
        raise NotFound(f"no suite named {suite!r}")
    floors = suite_noise(session, record.name, criteria_hash)
    note = None
    if not floors:
        which = f"criteria {criteria_hash}" if criteria_hash else f"suite {record.name!r}"
        note = f"no noise floor measured for {which}: run a calibration (assay calibrate)"
    return {
        "suite": record.name,
        "current_criteria_hash": record.current_criteria_hash,
        "noise": [floor.to_dict() for floor in floors],
        "note": note,
    }
