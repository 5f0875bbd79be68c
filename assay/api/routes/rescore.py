"""Manual re-scoring of a suite's stored items under its current criteria (the nightly run's twin)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.schemas import BY_PROVIDER, ProviderEstimateOut
from assay.scoring.rescoring import rescore as svc
from assay.scoring.store.db import transaction
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1", tags=["rescore"], route_class=StrictJsonRoute)


class RescoreIn(BaseModel):
    suite: str = Field(
        ...,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Suite name (a file in config/suites/, or a suite registered through POST /api/v1/suites)",
    )
    stale_only: bool = Field(
        False, description="Only items with a completed score under older criteria (not never-scored ones)"
    )
    partial: bool = Field(
        False, description="Also items whose current score is partial (judge skipped for lack of an API key)"
    )
    dry_run: bool = Field(
        False, description="Only count and estimate: items, judge calls (one per judge component and item, less "
        "those carried over unchanged), tokens, dollars"
    )
    lane: Literal["realtime", "batch"] = Field(
        "realtime", description="batch: judge calls through the provider's batch API (half price, slower)"
    )
    budget_usd: float | None = Field(
        None, gt=0, le=1e9, description="Judge spend limit of the run's batch, in US dollars; null: none"
    )


class EstimateOut(BaseModel):
    items: int
    judge_calls: int = Field(..., description="One per judge component and item, less those carried over")
    carried_over: int = Field(
        0, description="Judge calls not made: the component and the item are unchanged since the item's last "
        "score, so a re-score copies that result at no cost"
    )
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(..., description="Estimated judge cost in US dollars (batch lane: discounted)")
    lane: str
    output_basis: str = Field(
        ...,
        description="history (the judge component's past judgments in this suite), max_tokens (a bound), "
        "both joined by ' + ' when judge components differ, or none",
    )
    notes: list[str]
    by_provider: list[ProviderEstimateOut] = Field(default_factory=list, description=BY_PROVIDER)


class RescoreOut(BaseModel):
    suite: str
    criteria_hash: str = Field(..., description="The suite's current criteria hash: the new scores' stamp")
    selection: str = Field(..., description="Which items were taken: stale, never scored, partial")
    dry_run: bool
    estimate: EstimateOut
    batch_id: str | None = Field(None, description="The run's batch (null for a dry run or when nothing is stale)")


@router.post(
    "/rescore",
    response_model=RescoreOut,
    status_code=202,
    summary="Re-score a suite's stale (and never-scored, or partial) items under its current criteria",
    description="Counts the items and estimates the judge calls, tokens and dollars; unless `dry_run`, "
    "creates one batch (old scores are kept as history) that a worker fills in waves and then scores. "
    "Items that already have a score under the current criteria are skipped, so repeating a run "
    "creates nothing twice. 200 for a dry run or when there is nothing to re-score.",
    responses={200: {"model": RescoreOut, "description": "Dry run, or nothing to re-score"}},
)
def rescore(body: RescoreIn, principal: Annotated[Principal, Depends(require_principal)]) -> JSONResponse:
    from assay.workers.tasks import rescore_suite

    settings = get_settings()
    with transaction() as session:
        answer = svc.start_rescore(
            session,
            body.suite,
            svc.Selection(stale_only=body.stale_only, partial=body.partial),
            dry_run=body.dry_run,
            lane=body.lane,
            budget_usd=body.budget_usd,
            triggered_by=principal.id,
            catalog=load_model_catalog(settings.config_dir),
            judge_key_set=settings.anthropic_api_key is not None,
        )
    out: dict[str, Any] = RescoreOut(**answer).model_dump()
    batch_id = answer["batch_id"]
    if batch_id is None:
        return JSONResponse(out, status_code=200)
    rescore_suite.apply_async(args=(batch_id, body.stale_only, body.partial))
    return JSONResponse(out, status_code=202, headers={"Location": f"/api/v1/batches/{batch_id}"})
