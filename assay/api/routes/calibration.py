"""The judge's noise floor: calibration runs and the noise estimates they store.

A thin adapter over ``assay.scoring.trust.calibration``:

- ``POST /api/v1/suites/{name}/calibrations``: judge a deterministic sample of the suite's stored items
  K times under its current criteria (a dry run only estimates);
- ``GET /api/v1/suites/{name}/calibrations/{id}``: a run, its batch's progress and, once done, its
  estimates;
- ``GET /api/v1/suites/{name}/noise``: the latest noise floor of each criteria hash of the suite.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.params import SuiteName
from assay.api.publish import start_planner
from assay.api.schemas import BY_PROVIDER, ProviderEstimateOut
from assay.scoring.store.db import transaction
from assay.scoring.suites.loader import load_model_catalog
from assay.scoring.trust import calibration as svc
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/suites", tags=["calibration"], route_class=StrictJsonRoute)

CriteriaHash = Annotated[
    str | None,
    Query(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$", description="Only this criteria hash"),
]


class CalibrationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sample: int = Field(
        ...,
        ge=1,
        le=svc.MAX_SAMPLE,
        description="How many stored items of the suite to judge (all of them when it has fewer). The sample is "
        "deterministic: the items whose SHA-256 of '<suite>:<item id>' is smallest",
    )
    repeats: int = Field(
        ..., ge=svc.MIN_REPEATS, le=svc.MAX_REPEATS, description="How many times each item is judged (at least 2)"
    )
    budget_usd: float | None = Field(
        None,
        gt=0,
        le=1e9,
        description="Judge spend limit of the run's batch, in US dollars. Null: the ASSAY_CALIBRATION_MAX_USD cap is the "
        "budget, and a run estimated over it is refused (422 budget_required)",
    )
    lane: Literal["realtime", "batch"] = Field(
        "realtime", description="batch: judge calls through the provider's batch API (half price, slower)"
    )
    dry_run: bool = Field(False, description="Only pick the sample and estimate the judge calls, tokens and dollars")


class EstimateOut(BaseModel):
    items: int
    judge_calls: int = Field(..., description="One per judge component, item and repeat (none carries over)")
    carried_over: int = Field(0, description="Always 0: a judge's answer never carries over in a calibration")
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(..., description="Estimated judge cost in US dollars (batch lane: discounted)")
    lane: str
    output_basis: str
    notes: list[str]
    by_provider: list[ProviderEstimateOut] = Field(default_factory=list, description=BY_PROVIDER)


class NoiseOut(BaseModel):
    calibration_run_id: str
    criteria_hash: str
    sigma_w: dict[str, float | None] = Field(
        ..., description="Per judge component: the pooled within-item standard deviation of its 0-1 score"
    )
    sigma_w_total: float | None = Field(..., description="The same for the score's total (null: no item had two completed repeats)")
    flip_share: float | None = Field(
        ..., description="Share of the items with two or more completed repeats whose pass/fail was not the same in all"
    )
    items: int = Field(..., description="Items pooled for the total (those with at least two completed repeats)")
    items_by_component: dict[str, int] = Field(..., description="Items pooled per judge component")
    repeats: int
    computed_at: str


class CalibrationOut(BaseModel):
    id: str
    suite: str
    criteria_hash: str = Field(..., description="The criteria the repeats were judged under (the suite's current one)")
    sample: int = Field(..., description="Items in the sample")
    repeats: int
    status: str = Field(..., description="running, completed, failed or cancelled")
    batch_id: str | None = Field(..., description="The batch carrying the N×K calibration scores (null once deleted)")
    batch_status: str | None
    progress: dict[str, int] | None = Field(..., description="The batch's scores by outcome")
    spent_usd: float | None
    budget_usd: float | None
    created_by: str
    created_at: str
    completed_at: str | None
    noise: NoiseOut | None = Field(..., description="The estimates, once the batch finished")


class CalibrationStarted(BaseModel):
    suite: str
    criteria_hash: str
    sample: int = Field(..., description="Items picked (fewer than asked when the suite has fewer)")
    repeats: int
    dry_run: bool
    estimate: EstimateOut
    calibration: CalibrationOut | None = Field(None, description="The run (null for a dry run)")


class NoiseList(BaseModel):
    suite: str
    current_criteria_hash: str
    noise: list[NoiseOut] = Field(..., description="The latest run's estimates per criteria hash, newest first")
    note: str | None = Field(None, description="Set when no noise floor was measured")


@router.post(
    "/{name}/calibrations",
    response_model=CalibrationStarted,
    status_code=202,
    summary="Measure the judge's noise: judge a sample of the suite's items several times",
    description="Picks `sample` stored items of the suite (deterministically: the smallest SHA-256 of "
    "'<suite>:<item id>') and creates a calibration run and one batch holding `sample` × `repeats` "
    "calibration scores under the suite's current criteria, estimated, budgeted and planned like any batch. "
    "Deterministic components may carry over from the item's last score; judge components never do. "
    "When the batch finishes, the pooled within-item standard deviation of each judge component and of "
    "the total, and the share of items whose pass/fail flipped, are stored (`GET .../noise`). Calibration "
    "scores are no machine verdicts: they stay out of latest scores, pass rates, diff, compare, "
    "agreement, training data and the review queue. Without `budget_usd` the run's budget is "
    "`ASSAY_CALIBRATION_MAX_USD`, and a run estimated over it is refused with 422 "
    "`budget_required` naming the estimate and the cap (a dry run answers, with a note saying so). 422 for "
    "a suite without a judge component or without stored items; 200 for a dry run.",
    responses={
        200: {"model": CalibrationStarted, "description": "Dry run"},
        404: {"description": "No such suite"},
        409: {"description": "The suite is disabled"},
        422: {
            "description": "Bounds, a suite without a judge component, no stored items, or an estimate over "
            "ASSAY_CALIBRATION_MAX_USD without budget_usd (budget_required)"
        },
    },
)
def create_calibration(
    name: SuiteName, body: CalibrationIn, principal: Annotated[Principal, Depends(require_principal)]
) -> JSONResponse:
    settings = get_settings()
    with transaction() as session:
        catalog = load_model_catalog(settings.config_dir)
        plan = svc.plan(session, name, body.sample, body.repeats, body.lane, catalog)
        run = None
        if not body.dry_run:
            budget = svc.run_budget(plan, body.budget_usd, settings.calibration_max_usd)
            run = svc.start(session, plan, created_by=principal.id, lane=body.lane, budget_usd=budget)
        estimate = plan.estimate.to_dict()
        note = svc.budget_note(plan, body.budget_usd, settings.calibration_max_usd)
        out: dict[str, Any] = CalibrationStarted(
            suite=plan.suite,
            criteria_hash=plan.criteria_hash,
            sample=len(plan.item_ids),
            repeats=plan.repeats,
            dry_run=body.dry_run,
            estimate=EstimateOut(**{**estimate, "notes": [*estimate["notes"], *([note] if note else [])]}),
            calibration=CalibrationOut(**svc.run_view(session, run)) if run is not None else None,
        ).model_dump()
        batch_id = run.batch_id if run is not None else None
        run_id = run.id if run is not None else None
    if batch_id is None:
        return JSONResponse(out, status_code=200)
    start_planner(batch_id)
    return JSONResponse(out, status_code=202, headers={"Location": f"/api/v1/suites/{plan.suite}/calibrations/{run_id}"})


@router.get(
    "/{name}/calibrations/{run_id}",
    response_model=CalibrationOut,
    summary="A calibration run: its batch's progress and, once finished, the judge's noise it measured",
    responses={404: {"description": "No such run of this suite"}},
)
def get_calibration(
    name: SuiteName, run_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    with transaction() as session:
        return svc.run_view(session, svc.get_run(session, name, run_id))


@router.get(
    "/{name}/noise",
    response_model=NoiseList,
    summary="The judge's noise floor per criteria hash of the suite (the latest calibration run of each)",
    description="σw per judge component and for the total, and the flip share, from the latest finished "
    "calibration run of each criteria hash (or only `criteria_hash`). An empty list (with a note) when "
    "none was measured: compare and diff then say \"no noise floor measured\".",
    responses={404: {"description": "No such suite"}},
)
def get_noise(
    name: SuiteName, _: Annotated[Principal, Depends(require_principal)], criteria_hash: CriteriaHash = None
) -> dict[str, Any]:
    with transaction() as session:
        return svc.noise_report(session, name, criteria_hash)
