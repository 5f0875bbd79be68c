"""Dashboard page of the machine's agreement with people: per suite with human labels, per criteria
hash, the numbers of ``GET /api/v1/suites/{name}/agreement`` (accuracy, Cohen's kappa, Spearman, the
confusion matrix, ties and the disagreeing items, each linked to its item page), for the total and each
judge component, and per slice of ``by`` (``metadata.KEY``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from assay.api.dashboard import queries
from assay.api.dashboard.routes import Viewer, render, viewer
from assay.api.json_body import StrictJsonRoute
from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.store.db import transaction
from assay.scoring.store.models import SuiteRecord
from assay.scoring.trust import agreement

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)
LISTED = 50


@router.get("/agreement", response_class=HTMLResponse)
def agreement_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    suite: Annotated[str | None, Query(max_length=100, pattern=r"^[A-Za-z0-9_-]*$")] = None,
    criteria: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-f]*$")] = None,
    by: Annotated[str | None, Query(max_length=120)] = None,
) -> HTMLResponse:
    by = (by or "").strip() or None
    error = None
    with transaction() as session:
        suites = queries.labelled_suites(session)
        chosen = suite or (suites[0].name if suites else None)
        report = None
        if chosen:
            try:
                report = agreement.suite_agreement(session, chosen, criteria or None, limit=LISTED, by=by)
            except NotFound:
                what = f"criteria {criteria}" if criteria and session.get(SuiteRecord, chosen) else f"suite {chosen}"
                return render(request, who, "not_found.html", status_code=404, what=what)
            except BadRequest as exc:
                error = exc.message
                report = agreement.suite_agreement(session, chosen, criteria or None, limit=LISTED)
    return render(
        request, who, "agreement.html", status_code=400 if error else 200,
        suites=suites, chosen=chosen, report=report, listed=LISTED, by=by or "", error=error,
    )
