"""Design 000's ``POST /api/score-query``: score one generated KQL query against its expected twin.

The request and response are the KQL scoring design's shapes. Scoring runs in the workers like any other score
(the judge is slow): the request creates one item and one score (no batch) and enqueues its
components after the commit. ``?wait=SECONDS`` holds the request until the score is finished (200,
the design's response) or the time is up (202 with the score id and a ``Location`` to poll at
``GET /api/score-query/{score_id}``).

The design's ``model`` field picks the judge model: a model named in ``config/models.yaml`` scores
under a variant of the suite's criteria with only ``judge.model`` replaced (the suite-level judge of
its ``judge: true`` component; a rubric judge component keeps its own model). The variant is a criteria
definition of its own (its own hash), registered on first use, so a score always names exactly the
criteria that produced it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from starlette.concurrency import run_in_threadpool

from assay.api.auth import Principal, require_principal
from assay.api.body_limit import body_limit
from assay.api.errors import ProblemText
from assay.api.json_body import StrictJsonRoute
from assay.api.publish import publish_components
from assay.scoring.errors import CriteriaError, InvalidInput, NotFound
from assay.scoring.intake import datasets
from assay.scoring.intake.ingest import contains_nul, item_content_hash
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.kql import KqlItem
from assay.scoring.pipeline.components import ComponentRef, pending_score
from assay.scoring.pipeline.planning import create_components
from assay.scoring.reports.views import component_view
from assay.scoring.store.db import transaction
from assay.scoring.store.models import FINISHED_SCORE_STATUSES, Item, Score, utcnow
from assay.scoring.suites.criteria import current_suite, load_criteria, register_criteria
from assay.scoring.suites.loader import Criteria, canonical_json, load_model_catalog
from assay.settings import get_settings

router = APIRouter(prefix="/api/score-query", tags=["score-query"], route_class=StrictJsonRoute)

DEFAULT_SUITE = "kql"
# The longest a request may wait for its score (the `wait` parameter's bound); tests may lower it.
MAX_WAIT_SECONDS = 60.0
_POLL_FIRST, _POLL_MAX = 0.05, 0.5

Row = dict[str, Any]


class ScoreQueryIn(BaseModel):
    """Design 000's request, plus optional execution errors, a dataset and a pinned now."""

    model_config = ConfigDict(extra="forbid", str_max_length=200_000)

    generated_kql: str = Field(..., min_length=1, description="The generated query.")
    expected_kql: str = Field(..., min_length=1, description="The reference query.")
    prompt: str = Field(..., description="The user's natural-language request.")
    generated_columns: list[str] | None = Field(None, description="Columns the generated query returned.")
    expected_columns: list[str] | None = Field(None, description="Columns the expected query returned.")
    generated_results: list[Row] | None = Field(None, description="Rows the generated query returned.")
    expected_results: list[Row] | None = Field(None, description="Rows the expected query returned.")
    model: str | None = Field(
        None,
        max_length=200,
        description="Model of the suite-level judge (a name in config/models.yaml); default: the suite's. "
        "Rubric judge components keep their own.",
    )
    generated_error: str | None = Field(None, description="Set when the generated query failed to execute.")
    expected_error: str | None = Field(None, description="Set when the expected query failed to execute.")
    dataset: str | None = Field(
        None, min_length=1, max_length=255, description="A registered dataset (hash or name) to run both queries on."
    )
    now: datetime | None = Field(None, description="The instant now()/ago() read offline; default: the score's creation.")


class ComponentOut(BaseModel):
    score: float | None = Field(..., description="0..1; null when the component was skipped or failed")
    weighted_score: float | None
    weight: float
    details: dict[str, Any]
    status: str = Field(..., description="ok / failed / skipped (pending while the score runs)")
    reason: ProblemText | None = None


class ScoreOut(BaseModel):
    total_score: float | None
    is_successful: bool
    threshold: float
    components: dict[str, ComponentOut]
    score_id: str
    status: str
    suite: str
    criteria_hash: str
    judge_model: str | None
    partial: bool
    error_message: ProblemText | None = Field(None, description="Why the score failed, or what kept it from passing")


class ScoreQueryOut(BaseModel):
    success: bool = Field(..., description="False when the score could not be computed (see error)")
    score: ScoreOut
    error: ProblemText | None = None


class ScoreQueryAccepted(BaseModel):
    score_id: str
    status: str


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": ScoreQueryOut, "description": "The finished score, in the KQL scoring design's shape"},
    202: {"model": ScoreQueryAccepted, "description": "Still scoring: poll the Location"},
}


# --- creating the score ----------------------------------------------------------------------------


def _criteria_for(session: Session, criteria_hash: str, suite: str, model: str | None) -> tuple[str, Criteria]:
    """The suite's criteria, or the variant whose judge is ``model`` (registered on first use)."""
    criteria = load_criteria(session, criteria_hash)
    if model is None or not model.strip() or (criteria.judge is not None and criteria.judge.model == model):
        return criteria_hash, criteria
    if criteria.judge is None:
        raise InvalidInput(f"suite {suite!r} has no suite-level judge section, so 'model' cannot choose one")
    try:
        name = load_model_catalog(get_settings().config_dir).resolve(criteria.judge.provider, model)
    except CriteriaError as exc:
        raise InvalidInput(f"model {model!r} cannot judge: {exc.message}") from None
    variant = criteria.model_copy(update={"judge": criteria.judge.model_copy(update={"model": name})})
    return register_criteria(session, variant), variant


def _create(body: ScoreQueryIn, suite: str, principal: Principal) -> tuple[uuid.UUID, list[ComponentRef]]:
    try:
        item = KqlItem.model_validate(body.model_dump(exclude={"model"}, exclude_none=True))
    except ValidationError as exc:
        raise InvalidInput(f"not a valid KQL item: {exc.errors(include_url=False)[0]['msg']}") from None
    payload = item.model_dump(mode="json", exclude_none=True)
    if contains_nul(payload):
        raise InvalidInput("the request contains a NUL character (\\u0000), which the store cannot hold")
    with transaction() as session:
        record = current_suite(session, suite)
        kind = get_kind(record.kind)
        if kind.item_model is not KqlItem:
            raise InvalidInput(f"suite {suite!r} scores {record.kind!r} items, not KQL queries")
        criteria_hash, criteria = _criteria_for(session, record.current_criteria_hash, suite, body.model)
        dataset_hash = None
        if item.dataset is not None:
            try:
                dataset_hash = datasets.resolve(session, item.dataset).content_hash
            except NotFound as exc:
                raise InvalidInput(exc.message) from None
            payload["dataset"] = dataset_hash  # the payload names exactly the content it is scored on
        payload_json = canonical_json(payload)  # finite: the body's parser refused NaN and infinity
        now = utcnow()
        item_row = Item(
            id=uuid.uuid4(),
            kind=kind.name,
            external_id=None,
            payload=payload,
            content_hash=item_content_hash(payload_json, dataset_hash),
            dataset_hash=dataset_hash,
            origin_batch_id=None,
            created_at=now,
        )
        session.add(item_row)
        session.flush()
        score = Score(
            **pending_score(
                item_id=item_row.id,
                suite=record.name,
                criteria_hash=criteria_hash,
                criteria=criteria,
                triggered_by=principal.id,
                created_at=now,
            )
        )
        session.add(score)
        session.flush()
        refs = create_components(session, [(score.id, criteria_hash)], now)
        score_id = score.id
    return score_id, refs


# --- reading it back -------------------------------------------------------------------------------


def score_query_view(score: Score, criteria: Criteria) -> dict[str, Any]:
    """Design 000's response for a stored score (with its components loaded)."""
    finished_ok = score.status == "completed"
    body = {
        "total_score": score.total,
        "is_successful": bool(score.passed) and finished_ok,
        "threshold": criteria.threshold,
        "components": {c.component: component_view(c) for c in score.components},
        "score_id": str(score.id),
        "status": score.status,
        "suite": score.suite_name,
        "criteria_hash": score.criteria_hash,
        "judge_model": criteria.judge.model if criteria.judge is not None else None,
        "partial": bool(score.partial),
        "error_message": score.error_message,
    }
    view: dict[str, Any] = {"success": finished_ok, "score": body}
    if not finished_ok:
        view["error"] = score.error_message or f"the score is {score.status}"
    return view


def _load(score_id: uuid.UUID) -> tuple[str, dict[str, Any] | None]:
    """(status, the design view when finished)."""
    with transaction() as session:
        score = session.scalar(select(Score).where(Score.id == score_id).options(selectinload(Score.components)))
        if score is None:
            raise NotFound(f"no score {score_id}")
        if score.status not in FINISHED_SCORE_STATUSES:
            return score.status, None
        return score.status, score_query_view(score, load_criteria(session, score.criteria_hash))


def _status(score_id: uuid.UUID) -> str | None:
    with transaction() as session:
        return session.scalar(select(Score.status).where(Score.id == score_id))


def _accepted(score_id: uuid.UUID, status: str) -> JSONResponse:
    return JSONResponse(
        {"score_id": str(score_id), "status": status},
        status_code=202,
        headers={"Location": f"{router.prefix}/{score_id}"},
    )


@router.post(
    "",
    summary="Score one generated KQL query (the KQL scoring design)",
    response_model=None,
    responses=_RESPONSES,
    status_code=200,
)
@body_limit("max_item_bytes")  # the body is one item, as a line of a batch upload is
async def score_query(
    body: ScoreQueryIn,
    principal: Annotated[Principal, Depends(require_principal)],
    suite: Annotated[
        str, Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$", description="A KQL suite (default: kql).")
    ] = DEFAULT_SUITE,
    wait: Annotated[float, Query(ge=0, le=60, description="Seconds to wait for the finished score (0-60).")] = 0,
) -> JSONResponse:
    score_id, refs = await run_in_threadpool(_create, body, suite, principal)
    await run_in_threadpool(publish_components, refs)
    deadline = time.monotonic() + min(wait, MAX_WAIT_SECONDS)
    delay = _POLL_FIRST
    while True:
        status = await run_in_threadpool(_status, score_id)
        if status in FINISHED_SCORE_STATUSES:
            _, view = await run_in_threadpool(_load, score_id)
            return JSONResponse(view, status_code=200)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _accepted(score_id, status or "pending")
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX)


@router.get(
    "/{score_id}",
    summary="A score created by POST /api/score-query: 200 when finished, 202 while it runs",
    response_model=None,
    responses={**_RESPONSES, 404: {"description": "No such score"}},
)
def get_score_query(score_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> JSONResponse:
    status, view = _load(score_id)
    if view is None:
        return _accepted(score_id, status)
    return JSONResponse(view, status_code=200)
