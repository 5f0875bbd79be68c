"""Dashboard page comparing two batches: the numbers of ``GET /api/v1/compare`` (pairs matched and left
out, the mean differences with their intervals and the judge's noise floor beside them, McNemar's test,
the items that moved most and flipped, each linked to its item page) and a CSV of every pair.

Opened bare, the page offers the latest batches (suite, created time, items) to pick a and b from, or
ids to paste; ``by`` (``metadata.KEY``) adds each slice's differences. ``/dashboard/compare?a=A``
without ``b`` lists the latest batches of A's suite to compare it with."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from assay.api.dashboard.routes import Viewer, render, viewer
from assay.api.json_body import StrictJsonRoute
from assay.api.routes.compare import comparison_out
from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.intake import batches as batch_svc
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch
from assay.scoring.trust import compare as svc

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)
CANDIDATES = 20
RECENT = 50  # batches offered in the pickers for a and b
BatchParam = Annotated[str | None, Query(max_length=64, description="A batch id")]


def _recent(session: Session) -> list[dict[str, Any]]:
    return [
        {"id": str(b.id), "suite": b.suite_name, "created_at": b.created_at, "total": b.total_items, "status": b.status}
        for b in batch_svc.list_batches(session, limit=RECENT, offset=0)
    ]


def _parse(value: str | None, side: str) -> tuple[uuid.UUID | None, str | None]:
    if not value or not value.strip():
        return None, None
    try:
        return uuid.UUID(value.strip()), None
    except ValueError:
        return None, f"'{side}' is not a batch id: {value!r}"


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    a: BatchParam = None,
    b: BatchParam = None,
    by: Annotated[str | None, Query(max_length=120, description="metadata.KEY")] = None,
) -> HTMLResponse:
    (batch_a, error_a), (batch_b, error_b) = _parse(a, "a"), _parse(b, "b")
    error = error_a or error_b
    if batch_a is not None and batch_a == batch_b:
        error = "'a' and 'b' are the same batch; pick two different batches"
    by = (by or "").strip() or None
    report, candidates, suite = None, [], None
    with transaction() as session:
        recent = _recent(session)
        if error is None and batch_a is not None and batch_b is not None:
            try:
                report = comparison_out(svc.compare_batches(session, batch_a, batch_b, by))
            except NotFound as exc:
                return render(request, who, "not_found.html", status_code=404, what=exc.message.removeprefix("no "))
            except BadRequest as exc:
                error = exc.message
        elif error is None and batch_a is not None:
            first = session.get(Batch, batch_a)
            if first is None:
                return render(request, who, "not_found.html", status_code=404, what=f"batch {batch_a}")
            suite = first.suite_name
            candidates = [
                {"id": str(c.id), "status": c.status, "created_at": c.created_at, "total": c.total_items, "hash": c.criteria_hash}
                for c in batch_svc.list_batches(session, limit=CANDIDATES + 1, offset=0, suite=suite)
                if c.id != batch_a
            ][:CANDIDATES]
    return render(
        request,
        who,
        "compare.html",
        status_code=400 if error else 200,
        a=str(batch_a) if batch_a else (a or ""),
        b=str(batch_b) if batch_b else (b or ""),
        by=by or "",
        error=error,
        report=report,
        suite=suite,
        candidates=candidates,
        recent=recent,
    )
