"""Dashboard page of the suites' juries: per suite whose current criteria have a jury, per criteria
hash, the numbers of ``GET /api/v1/suites/{name}/jury-agreement`` (Krippendorff's alpha, each pair of
members' agreement, each member's agreement with people)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.api.dashboard.routes import Viewer, render, viewer
from assay.api.json_body import StrictJsonRoute
from assay.scoring.errors import NotFound
from assay.scoring.store.db import transaction
from assay.scoring.store.models import SuiteRecord
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.trust.jury_agreement import suite_jury_agreement

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)


def jury_suites(session: Session) -> list[str]:
    """The active suites whose current criteria have a jury, by name."""
    names = []
    for name, criteria_hash in session.execute(
        select(SuiteRecord.name, SuiteRecord.current_criteria_hash).where(SuiteRecord.state == "active").order_by(SuiteRecord.name)
    ):
        try:
            criteria = load_criteria(session, criteria_hash)
        except NotFound:
            continue
        if any(spec.jury is not None for spec in criteria.components.values()):
            names.append(name)
    return names


@router.get("/juries", response_class=HTMLResponse)
def juries_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    suite: Annotated[str | None, Query(max_length=100, pattern=r"^[A-Za-z0-9_-]*$")] = None,
) -> HTMLResponse:
    with transaction() as session:
        suites = jury_suites(session)
        chosen = suite or (suites[0] if suites else None)
        report = None
        if chosen:
            try:
                report = suite_jury_agreement(session, chosen)
            except NotFound:
                return render(request, who, "not_found.html", status_code=404, what=f"suite {chosen}")
    return render(request, who, "juries.html", suites=suites, chosen=chosen, report=report)
