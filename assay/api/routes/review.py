"""The review queue: a suite's open entries, one entry with its machine score, and recording a person's
verdict. A thin adapter over ``assay.scoring.trust.review``."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import selectinload

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.params import Offset, SuiteName
from assay.scoring.errors import NotFound
from assay.scoring.reports.views import score_view
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score, SuiteRecord
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.trust import review as svc

router = APIRouter(tags=["review"], route_class=StrictJsonRoute)


QUEUE_DOC = """Entries of the suite's review queue with `status` (open by default), oldest first. A finalized
(completed) machine score enters when it matches one of the suite's review rules (`review:` in the suite:
`near_threshold`, `disagreement`, `repaired`, `random_share`); each entry lists the rules it matched as
`reasons`. A completed re-score of the item closes its older open entries. `counts` gives the suite's
entries per status."""

REVIEW_DOC = """Record a person's verdict on the entry's machine score: `passed` (required), an optional 0-1
`score` and a `comment` (up to 10,000 characters). The reviewer is the caller's principal: `key:NAME`
for an API key (or a dashboard session opened with it), `proxy:NAME` for a proxy user. The machine score is never changed; the verdict is stored with the reviewer and the time,
the entry becomes `reviewed`, and the verdict becomes the reviewer's label on the item (source `review`,
replacing their earlier label), used by agreement. A closed entry (its item was re-scored since) is a
409."""


class ReviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    passed: bool = Field(..., description="The reviewer's pass/fail verdict")
    score: float | None = Field(None, ge=0, le=1, description="The reviewer's 0-1 score, if they give one")
    comment: str | None = Field(None, max_length=svc.COMMENT_MAX, description="Why")


def _suite_exists(session: Any, name: str) -> None:
    if session.get(SuiteRecord, name) is None:
        raise NotFound(f"no suite named {name!r}")


@router.get("/api/v1/suites/{name}/review-queue", summary="A suite's review queue, paged", description=QUEUE_DOC)
def review_queue(
    name: SuiteName,
    _: Annotated[Principal, Depends(require_principal)],
    status: Annotated[Literal["open", "reviewed", "closed"], Query(description="Which entries")] = "open",
    limit: Annotated[int, Query(ge=1, le=500, description="Entries per page")] = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    with transaction() as session:
        _suite_exists(session, name)
        entries, total = svc.list_queue(session, name, status=status, limit=limit, offset=offset)
        counts = svc.queue_counts(session).get(name, {"open": 0, "reviewed": 0, "closed": 0})
    return {
        "suite": name,
        "status": status,
        "total": total,
        "limit": limit,
        "offset": offset,
        "counts": counts,
        "entries": [e.as_dict() for e in entries],
    }


def entry_detail(session: Any, entry_id: uuid.UUID) -> dict[str, Any]:
    """An entry with its item, its machine score (components and reasoning) and its reviews."""
    entry = svc.get_entry(session, entry_id)
    score = session.get(Score, entry.score_id, options=[selectinload(Score.components)])
    item = session.get(Item, entry.item_id)
    try:
        threshold: float | None = load_criteria(session, entry.criteria_hash).threshold
    except NotFound:
        threshold = None
    return {
        **entry.as_dict(),
        "item": {"item_id": str(item.id), "external_id": item.external_id, "kind": item.kind, "payload": item.payload},
        "score": score_view(score, threshold=threshold),
        "reviews": [svc.review_view(r) for r in svc.reviews_of_entry(session, entry_id)],
    }


@router.get(
    "/api/v1/review-queue/{entry_id}",
    summary="One review queue entry: the item, the machine score with its reasoning, the reviews so far",
)
def review_entry(entry_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> dict[str, Any]:
    with transaction() as session:
        return entry_detail(session, entry_id)


@router.post(
    "/api/v1/review-queue/{entry_id}/review",
    status_code=201,
    summary="Record a reviewer's verdict on an entry (the machine score is never changed)",
    description=REVIEW_DOC,
    responses={404: {"description": "No such entry"}, 409: {"description": "The entry is closed"}},
)
def record_review(
    entry_id: uuid.UUID, body: ReviewIn, principal: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    with transaction() as session:
        recorded = svc.record_review(
            session, entry_id, reviewer=principal.id, passed=body.passed, score=body.score, comment=body.comment
        )
        view = svc.review_view(recorded)
    return {**view, "entry_status": "reviewed"}
