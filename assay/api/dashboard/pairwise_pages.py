"""Dashboard pages of pairwise runs (``assay.scoring.trust.pairwise``; docs/pairwise.md).

``/dashboard/pairwise`` lists the latest runs (suite, compared batches, status and progress of the
run's batch, the pairwise criteria hash, what its judge calls cost) and holds the form that starts one:
the batches ticked in the order they are ticked (A first), the suite, labels, a slice key, budget and
lane; "Estimate" is the API's dry run, "Start" the run (both ``POST /api/v1/pairwise`` from
``static/dashboard.js``, with the CSRF token as every other change).

``/dashboard/pairwise/{id}`` shows one run: its systems, live progress, cancel (while it runs) and
resume under a new budget (after a budget cut), both the API's; and, once finished, its stored report —
for two batches B's wins / ties / losses against A, win rate with its bootstrap interval, sign test and
position-inconsistency rate, the same per slice; for three or more every head-to-head and the
Bradley-Terry leaderboard with intervals and rank ranges; and the pairs that moved most, each linked
to the pair's item page (both orders' verdicts) and to the two compared items."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.api.dashboard import queries as q
from assay.api.dashboard.routes import Viewer, render, viewer
from assay.api.json_body import StrictJsonRoute
from assay.scoring.errors import NotFound
from assay.scoring.intake import batches as batch_svc
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, PairwiseRun, SuiteRecord
from assay.scoring.trust import pairwise as svc
from assay.scoring.trust.runs import run_status

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)
LISTED = 50
RECENT = 50  # batches offered in the form


def _progress_rows(session: Session, runs: list[PairwiseRun]) -> dict[uuid.UUID, dict[str, Any]]:
    """The batches list's row (live progress, cost of the judge calls) of each run's batch."""
    batches = list(session.scalars(select(Batch).where(Batch.id.in_([r.batch_id for r in runs if r.batch_id]))))
    costs = q.batch_costs(session, [b.id for b in batches])
    return {b.id: q.batch_row(b, batch_svc.progress(session, b), costs.get(b.id, 0.0)) for b in batches}


def _pairwise_suites(session: Session) -> list[str]:
    """Active suites with a ``pairwise:`` section (the only ones a run can use)."""
    records = session.scalars(select(SuiteRecord).where(SuiteRecord.state == "active").order_by(SuiteRecord.name))
    return [r.name for r in records if (r.options or {}).get("pairwise") is not None]


def _recent_batches(session: Session) -> list[dict[str, Any]]:
    """The latest batches that can be compared: not a pairwise run's own."""
    return [
        {"id": str(b.id), "suite": b.suite_name, "created_at": b.created_at, "total": b.total_items, "status": b.status}
        for b in batch_svc.list_batches(session, limit=RECENT, offset=0)
        if not b.suite_name.endswith(svc.SUFFIX)
    ]


def _list_row(run: PairwiseRun, batch: dict[str, Any] | None) -> dict[str, Any]:
    """A run's row in the list: its batch's row gives the progress (the run's full view would count
    the batch's scores a second time)."""
    status = run_status(run, batch["status"] if batch else None)
    return {
        "id": str(run.id),
        "suite": run.suite_name,
        "criteria_hash": run.criteria_hash,
        "systems": run.systems,
        "status": status,
        "batch_status": batch["status"] if batch else None,
        "created_at": run.created_at,
        "report": svc.shown_report(run, status),
        "batch": batch,
    }


@router.get("/pairwise", response_class=HTMLResponse)
def pairwise_list_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    suite: Annotated[str | None, Query(max_length=100)] = None,
) -> HTMLResponse:
    with transaction() as session:
        runs = svc.list_runs(session, suite or None, LISTED)
        progress = _progress_rows(session, runs)
        rows = [_list_row(run, progress.get(run.batch_id)) for run in runs]
        suites = _pairwise_suites(session)
        recent = _recent_batches(session)
    return render(
        request, who, "pairwise.html", rows=rows, suites=suites, suite=suite or "", recent=recent,
        max_systems=svc.MAX_SYSTEMS, listed=LISTED,
    )


@router.get("/pairwise/{run_id}", response_class=HTMLResponse)
def pairwise_run_page(request: Request, run_id: uuid.UUID, who: Annotated[Viewer, Depends(viewer)]) -> HTMLResponse:
    with transaction() as session:
        try:
            run = svc.get_run(session, run_id)
        except NotFound:
            return render(request, who, "not_found.html", status_code=404, what=f"pairwise run {run_id}")
        view = svc.run_view(session, run)
        batch = _progress_rows(session, [run]).get(run.batch_id)
    return render(request, who, "pairwise_run.html", nav="pairwise", run=view, batch=batch, report=view["report"])
