"""Pairwise runs: batches compared item by item under a suite's pairwise rubric, both orders judged.

A thin adapter over ``assay.scoring.trust.pairwise``:

- ``POST /api/v1/pairwise``: start a run (a dry run only plans and estimates);
- ``GET /api/v1/pairwise``: the latest runs;
- ``GET /api/v1/pairwise/{id}``: a run, its batch's progress and, once done, its report;
- ``POST /api/v1/pairwise/{id}/cancel`` and ``/resume``: its batch's cancel and resume.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.publish import publish_components, start_planner
from assay.api.routes.batches import ResumeIn
from assay.api.schemas import BY_PROVIDER, ProviderEstimateOut
from assay.scoring.store.db import transaction
from assay.scoring.suites.loader import load_model_catalog
from assay.scoring.trust import pairwise as svc
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/pairwise", tags=["pairwise"], route_class=StrictJsonRoute)


class PairwiseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    suite: str = Field(..., min_length=1, max_length=100, description="The suite whose pairwise: rubric judges the pairs")
    batches: list[uuid.UUID] = Field(
        ..., min_length=2, max_length=svc.MAX_SYSTEMS, description="The batches to compare, A first (B against A for two)"
    )
    labels: list[str] | None = Field(
        None, description="A name per batch for the report (default: the batch ids)", max_length=svc.MAX_SYSTEMS
    )
    by: str | None = Field(None, pattern=r"^metadata\.[^\s]+$", description="Slice the report by metadata.KEY of A's item")
    budget_usd: float | None = Field(None, gt=0, le=1e9, description="Judge spend limit of the run's batch, in US dollars")
    lane: Literal["realtime", "batch"] = Field(
        "realtime", description="batch: judge calls through the provider's batch API (half price, slower)"
    )
    dry_run: bool = Field(False, description="Only plan the pairs and estimate the judge calls, tokens and dollars")


class EstimateOut(BaseModel):
    items: int = Field(..., description="Pairs")
    judge_calls: int = Field(..., description="Two per pair (its two orders), less those carried over")
    carried_over: int = Field(..., description="Judge calls copied from earlier runs under the same pairwise criteria")
    input_tokens: int
    output_tokens: int
    cost_usd: float
    lane: str
    output_basis: str
    notes: list[str]
    by_provider: list[ProviderEstimateOut] = Field(default_factory=list, description=BY_PROVIDER)


class PairwiseOut(BaseModel):
    id: str
    suite: str
    criteria_hash: str = Field(..., description="The pairwise criteria's own hash (not the suite's)")
    systems: list[dict[str, Any]] = Field(..., description="The compared batches in order, with their labels")
    design: dict[str, Any] = Field(..., description="How the pairs were planned: all pairs, or a cycle per item")
    status: str = Field(..., description="running, completed, failed or cancelled")
    batch_id: str | None = Field(..., description="The batch carrying one score per pair (null once deleted)")
    batch_status: str | None
    progress: dict[str, int] | None
    spent_usd: float | None
    budget_usd: float | None
    created_by: str
    created_at: str
    completed_at: str | None
    report: dict[str, Any] | None = Field(
        ..., description="Once finished: pairs, head_to_head, moved_most, slices and (3+ systems) the leaderboard"
    )


class PairwiseStarted(BaseModel):
    suite: str
    criteria_hash: str
    design: dict[str, Any]
    dry_run: bool
    estimate: EstimateOut
    notes: list[str]
    run: PairwiseOut | None = Field(None, description="The run (null for a dry run)")


class PairwiseList(BaseModel):
    runs: list[PairwiseOut]


@router.post(
    "",
    response_model=PairwiseStarted,
    status_code=202,
    summary="Compare two or more batches item by item with the suite's pairwise rubric, both orders judged",
    description="Matches the batches' items by external id and judges each planned pair (every pair of "
    "systems up to 6 batches, a cycle per item beyond) in both orders with the suite's `pairwise:` rubric. "
    "A verdict that changes with the order is a tie and a position inconsistency. The run is a batch of "
    "kind `pairwise` under the pairwise criteria's own hash: budget, lane, progress, cancel and resume as "
    "any batch, and pairs judged before under the same criteria carry over. 200 for a dry run.",
    responses={
        200: {"model": PairwiseStarted, "description": "Dry run"},
        404: {"description": "No such suite or batch"},
        409: {"description": "The suite is disabled"},
        422: {"description": "No pairwise: section, bad bounds or labels, or nothing to compare"},
    },
)
def create_pairwise(body: PairwiseIn, principal: Annotated[Principal, Depends(require_principal)]) -> JSONResponse:
    settings = get_settings()
    try:
        with transaction() as session:
            catalog = load_model_catalog(settings.config_dir)
            plan = svc.plan(session, body.suite, body.batches, catalog, labels=body.labels, by=body.by, lane=body.lane)
            run, spend = svc.start(
                session, plan, catalog, created_by=principal.id, lane=body.lane, budget_usd=body.budget_usd
            )
            out: dict[str, Any] = PairwiseStarted(
                suite=plan.suite,
                criteria_hash=plan.criteria_hash,
                design=plan.design,
                dry_run=body.dry_run,
                estimate=EstimateOut(**spend.to_dict()),
                notes=plan.notes,
                run=None if body.dry_run else PairwiseOut(**svc.run_view(session, run)),
            ).model_dump()
            if body.dry_run:
                raise svc.DryRun(out)  # the estimate needed the rows; rolling back keeps none of them
            batch_id, run_id = run.batch_id, run.id
    except svc.DryRun as dry:
        return JSONResponse(dry.result, status_code=200)
    assert batch_id is not None
    start_planner(batch_id)
    return JSONResponse(out, status_code=202, headers={"Location": f"/api/v1/pairwise/{run_id}"})


@router.get("", response_model=PairwiseList, summary="The latest pairwise runs, newest first")
def list_pairwise(
    _: Annotated[Principal, Depends(require_principal)],
    suite: Annotated[str | None, Query(max_length=100, description="Only this suite's runs")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    with transaction() as session:
        return {"runs": [svc.run_view(session, run) for run in svc.list_runs(session, suite, limit)]}


@router.get(
    "/{run_id}",
    response_model=PairwiseOut,
    summary="A pairwise run: its batch's progress and, once finished, its report and leaderboard",
    responses={404: {"description": "No such run"}},
)
def get_pairwise(run_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> dict[str, Any]:
    with transaction() as session:
        return svc.run_view(session, svc.get_run(session, run_id))


@router.post(
    "/{run_id}/cancel",
    response_model=PairwiseOut,
    summary="Cancel a pairwise run: its queued pairs are dropped, judged ones kept; no report",
    responses={404: {"description": "No such run"}, 409: {"description": "Its batch already finished, or was deleted"}},
)
def cancel_pairwise(run_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> dict[str, Any]:
    with transaction() as session:
        run = svc.get_run(session, run_id)
        svc.cancel_run(session, run)
        return svc.run_view(session, run)


@router.post(
    "/{run_id}/resume",
    response_model=PairwiseOut,
    summary="Resume a pairwise run the budget stopped, under a new budget; judged pairs are kept (never paid twice)",
    description="The run's batch is resumed as `POST /api/v1/batches/{id}/resume` does; the run is running "
    "again and its report is made afresh when the batch finishes.",
    responses={
        404: {"description": "No such run"},
        409: {"description": "Its batch is not budget_exhausted, or was deleted"},
        400: {"description": "Budget not above the spend"},
    },
)
def resume_pairwise(
    run_id: uuid.UUID, body: ResumeIn, _: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    with transaction() as session:
        run = svc.get_run(session, run_id)
        resumed = svc.resume_run(session, run, body.budget_usd)
        view = svc.run_view(session, run)
    publish_components(resumed.refs)
    if resumed.needs_planner:
        start_planner(uuid.UUID(view["batch_id"]))
    return view
