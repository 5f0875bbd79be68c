"""Items and criteria."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends
from sqlalchemy import select

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.api.schemas import CriteriaList, CriteriaOut, ItemOut, ScoreOut
from assay.scoring.errors import NotFound
from assay.scoring.intake import batches as svc
from assay.scoring.reports.views import iso, item_view, score_view
from assay.scoring.store.db import transaction
from assay.scoring.store.models import CriteriaDefinition, SuiteRecord
from assay.scoring.suites.criteria import load_criteria

router = APIRouter(prefix="/api/v1", tags=["items and criteria"], route_class=StrictJsonRoute)


@router.get("/items/{item_id}", response_model=ItemOut, summary="An item with all its scores (history included)")
def get_item(item_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> ItemOut:
    with transaction() as session:
        item, scores = svc.get_item(session, item_id)
        current = {s.name: s.current_criteria_hash for s in session.scalars(select(SuiteRecord))}
        views = [
            ScoreOut(
                **score_view(
                    s,
                    threshold=load_criteria(session, s.criteria_hash).threshold,
                    current_hash=current.get(s.suite_name),
                )
            )
            for s in scores
        ]
        return ItemOut(**item_view(item), scores=views)


def _suites_by_hash(session) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    out: dict[str, list[str]] = {}
    for suite in session.scalars(select(SuiteRecord).order_by(SuiteRecord.name)):
        out.setdefault(suite.current_criteria_hash, []).append(suite.name)
    return out


@router.get("/criteria", response_model=CriteriaList, summary="Every criteria definition, newest first")
def list_criteria(_: Annotated[Principal, Depends(require_principal)]) -> CriteriaList:
    with transaction() as session:
        current = _suites_by_hash(session)
        rows = session.scalars(select(CriteriaDefinition).order_by(CriteriaDefinition.created_at.desc()))
        return CriteriaList(
            criteria=[
                CriteriaOut(criteria_hash=r.criteria_hash, created_at=iso(r.created_at), suites=current.get(r.criteria_hash, []))
                for r in rows
            ]
        )


@router.get("/criteria/{criteria_hash}", response_model=CriteriaOut, summary="One criteria definition with its content")
def get_criteria(criteria_hash: str, _: Annotated[Principal, Depends(require_principal)]) -> CriteriaOut:
    with transaction() as session:
        row = session.get(CriteriaDefinition, criteria_hash)
        if row is None:
            raise NotFound(f"no criteria with hash {criteria_hash}")
        return CriteriaOut(
            criteria_hash=row.criteria_hash,
            created_at=iso(row.created_at),
            suites=_suites_by_hash(session).get(row.criteria_hash, []),
            criteria_content=row.criteria_content,
        )
