"""Alert sessions (the alert-session scoring design, TARSy EP-0028): sessions in, the EP's scoring API, and its use cases.

- ``POST /api/v1/sessions`` stores or updates a session; ``GET /api/v1/sessions`` lists them with
  their latest score; ``GET /api/v1/sessions/{session_id}`` returns one.
- ``POST /api/v1/scoring/sessions/{session_id}/score`` and ``GET …/score``: the EP's endpoints, with
  the score's ``status`` (rules in :mod:`assay.scoring.sessions.service`).
- ``GET /api/v1/scoring/missing-tools``, ``GET /api/v1/scoring/training-data`` and
  ``POST /api/v1/scoring/sessions/rescore``: missing-tool analytics, training-data curation and
  re-scoring a set (a batch over existing items).

Attribution (``scored_triggered_by``): the caller's principal, ``proxy:`` and ``X-Forwarded-User``
(else ``X-Forwarded-Email``) from a trusted proxy only; else ``key:`` and the name of the API key
used (``name:key`` in ``ASSAY_API_KEYS``; a bare key is named ``key-`` and 8 hex digits of its SHA-256).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Path, Query
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import selectinload

from assay.api.auth import Principal, require_principal
from assay.api.body_limit import body_limit
from assay.api.errors import ProblemText
from assay.api.json_body import StrictJsonRoute
from assay.api.publish import publish_components, start_planner
from assay.scoring.errors import InvalidInput, NotFound
from assay.scoring.intake.idempotency import IdempotencyKey
from assay.scoring.reports.views import iso
from assay.scoring.sessions import SUITE, analytics, history, store
from assay.scoring.sessions import service as svc
from assay.scoring.sessions.items import AlertSessionItem
from assay.scoring.sessions.views import session_score_view
from assay.scoring.store.db import new_session, transaction
from assay.scoring.store.models import Score

router = APIRouter(prefix="/api/v1", tags=["alert sessions (EP-0028)"], route_class=StrictJsonRoute)

SessionId = Annotated[
    str,
    Path(min_length=1, max_length=255, description="The TARSy session id (the item's external id)."),
]


def _check_id(session_id: str) -> str:
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in session_id):
        raise InvalidInput("a session id holds no control characters")
    return session_id


# --- schemas (the OpenAPI document) -----------------------------------------------------------------


class MissingToolOut(BaseModel):
    tool_name: str
    rationale: str


class AlternativeApproachOut(BaseModel):
    name: str
    description: str
    steps: list[str]


class SessionScoreOut(BaseModel):
    """EP-0028's ``SessionScore``, plus the score's status, error, timing, usage and cost."""

    score_id: str
    session_id: str | None
    criteria_hash: str
    total_score: int | None = Field(..., description="0-100 (round(100 x total)); null unless completed")
    score_breakdown: dict[str, Any] | None = Field(..., description="Dimension scores; flexible as the criteria evolve")
    score_reasoning: str | None
    missing_tools: list[MissingToolOut]
    alternative_approaches: list[AlternativeApproachOut]
    scored_triggered_by: str
    scored_at: str | None = Field(..., description="When the score was completed")
    is_current_criteria: bool = Field(..., description="False when the criteria changed since: the score is stale")
    status: str = Field(..., description="pending, in_progress, completed, failed, timed_out or cancelled")
    error_message: ProblemText | None
    started_at: str | None
    completed_at: str | None
    usage: dict[str, Any]
    cost_usd: float


class ScoreSessionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    force_rescore: bool = Field(False, description="Re-score even if a score exists (409 while one is in flight).")


class SessionStoredOut(BaseModel):
    session_id: str
    item_id: str
    content_hash: str
    status: str
    outcome: Literal["created", "updated", "versioned", "unchanged"] = Field(
        ...,
        description="created; updated in place (no score judged the old content); versioned (a new item: "
        "scores of the old content are kept); unchanged (same content)",
    )


class LatestScoreOut(BaseModel):
    score_id: str
    status: str
    total_score: int | None
    criteria_hash: str
    is_current_criteria: bool
    scored_at: str | None
    error_message: ProblemText | None


class SessionRowOut(BaseModel):
    session_id: str
    status: str | None
    alert_type: str | None
    started_at: str | None
    ended_at: str | None
    stored_at: str | None
    content_hash: str
    scoring_status: str = Field(..., description="not_scored, or the latest score's status")
    latest_score: LatestScoreOut | None


class SessionListOut(BaseModel):
    total: int
    limit: int
    offset: int
    sessions: list[SessionRowOut]


class SessionOut(BaseModel):
    session_id: str
    item_id: str
    content_hash: str
    stored_at: str | None
    versions: int = Field(..., description="Stored versions of the session (items under its id)")
    session: dict[str, Any]
    latest_score: SessionScoreOut | None


class RescoreIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    select: Literal["unscored", "stale", "failed"] = Field(
        ...,
        description="unscored: completed sessions with no score; stale: latest score under an older criteria hash; "
        "failed: latest score failed or timed out",
    )
    limit: int | None = Field(None, ge=1, le=1_000_000, description="At most this many sessions (oldest stored first).")


class RescoreOut(BaseModel):
    batch_id: str | None = Field(..., description="The batch scoring the set (GET /api/v1/batches/{id}); null when empty")
    status: str | None
    suite: str
    criteria_hash: str
    select: str
    selected: int
    skipped_in_flight: int = Field(..., description="Sessions left out because a score of theirs is pending or running")
    session_ids: list[str] = Field(..., description="The first 1000 selected sessions")
    replayed: bool = False


# --- sessions in ------------------------------------------------------------------------------------------


@router.post(
    "/sessions",
    response_model=SessionStoredOut,
    status_code=201,
    summary="Store a session, or update the stored one (same session_id)",
    responses={200: {"model": SessionStoredOut, "description": "Updated or unchanged"}, 413: {"description": "Too large"}},
)
@body_limit("max_session_bytes")
def post_session(item: AlertSessionItem, _: Annotated[Principal, Depends(require_principal)]) -> JSONResponse:
    with transaction() as session:
        stored = store.store_session(session, item)
        body = SessionStoredOut(
            session_id=item.session_id,
            item_id=str(stored.item.id),
            content_hash=stored.item.content_hash,
            status=item.status,
            outcome=stored.outcome,  # type: ignore[arg-type]
        )
    return JSONResponse(body.model_dump(), status_code=201 if stored.created else 200)


def _latest_out(row: Any, hashes: dict[str, str]) -> LatestScoreOut | None:
    if row.score_id is None:
        return None
    completed = row.score_status == "completed"
    return LatestScoreOut(
        score_id=str(row.score_id),
        status=row.score_status,
        total_score=store.percent(row.total) if completed else None,
        criteria_hash=row.criteria_hash,
        is_current_criteria=hashes.get(row.suite_name) == row.criteria_hash,
        scored_at=iso(row.completed_at) if completed else None,
        error_message=row.error_message,
    )


@router.get("/sessions", response_model=SessionListOut, summary="Sessions with their latest score and scoring status")
def list_sessions(
    _: Annotated[Principal, Depends(require_principal)],
    scoring: Annotated[
        Literal["scored", "not_scored", "failed", "scoring"] | None,
        Query(description="scored (latest score completed), not_scored, failed (latest failed / timed out), scoring (in flight)"),
    ] = None,
    min_score: Annotated[int | None, Query(ge=0, le=100, description="Latest score completed with total_score >= this")] = None,
    status: Annotated[str | None, Query(max_length=40, description="Session status, e.g. completed")] = None,
    sort: Annotated[Literal["recent", "score_desc", "score_asc"], Query(description="recent: newest stored first")] = "recent",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> SessionListOut:
    if status is not None:
        _check_id(status)
    with transaction() as session:
        total, rows = svc.list_sessions(
            session, scoring=scoring, min_score=min_score, status=status, sort=sort, limit=limit, offset=offset
        )
        hashes = svc.current_hashes(session)
    return SessionListOut(
        total=total,
        limit=limit,
        offset=offset,
        sessions=[
            SessionRowOut(
                session_id=r.session_id,
                status=r.status,
                alert_type=r.alert_type,
                started_at=r.started_at,
                ended_at=r.ended_at,
                stored_at=iso(r.stored_at),
                content_hash=r.content_hash,
                scoring_status=r.score_status or "not_scored",
                latest_score=_latest_out(r, hashes),
            )
            for r in rows
        ],
    )


def _score_view(session: Any, score: Score, hashes: dict[str, str]) -> dict[str, Any]:
    feedback = store.feedback_for(session, [score.id])[score.id]
    session_id = score.item.external_id if score.item is not None else None
    return session_score_view(score, session_id, current_hash=hashes.get(score.suite_name), feedback=feedback)


@router.get(
    "/sessions/{session_id}",
    response_model=SessionOut,
    summary="A stored session (its current version) with its latest score",
    responses={404: {"description": "Not stored"}},
)
def get_session(session_id: SessionId, _: Annotated[Principal, Depends(require_principal)]) -> SessionOut:
    _check_id(session_id)
    with transaction() as session:
        item = store.current_item(session, session_id)
        if item is None:
            raise NotFound(f"no session {session_id!r} is stored")
        versions = session.scalar(select(func.count()).select_from(store.session_items(session_id).subquery()))
        latest = store.latest_score(session, session_id)
        hashes = svc.current_hashes(session)
        return SessionOut(
            session_id=session_id,
            item_id=str(item.id),
            content_hash=item.content_hash,
            stored_at=iso(item.created_at),
            versions=versions or 0,
            session=item.payload,
            latest_score=SessionScoreOut(**_score_view(session, latest, hashes)) if latest is not None else None,
        )


# --- the EP's scoring endpoints --------------------------------------------------------------------------

_SCORE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": SessionScoreOut, "description": "The latest score, finished (completed, failed, timed_out)"},
    202: {"model": SessionScoreOut, "description": "Pending or in progress (just created, or already running)"},
    400: {"description": "The session is not completed"},
    404: {"description": "Unknown session (neither stored nor known to the history service)"},
    409: {"description": "force_rescore while a score is pending or in progress; or scoring is disabled"},
    502: {"description": "The history service failed"},
    504: {"description": "The history service did not answer in time"},
}


def _fetch_if_missing(session_id: str) -> None:
    with transaction() as session:
        if store.session_exists(session, session_id):
            return
    client = history.configured_client()
    if client is None:
        raise NotFound(f"no session {session_id!r} is stored (and no history service is configured to fetch it from)")
    item = client.fetch(session_id)
    with transaction() as session:
        store.store_session(session, item)


@router.post(
    "/scoring/sessions/{session_id}/score",
    response_model=None,
    responses=_SCORE_RESPONSES,
    summary="Score a session (EP-0028): the latest score, or a new one",
)
def score_session(
    session_id: SessionId,
    principal: Annotated[Principal, Depends(require_principal)],
    body: Annotated[ScoreSessionIn | None, Body()] = None,
) -> JSONResponse:
    _check_id(session_id)
    force = body.force_rescore if body is not None else False
    _fetch_if_missing(session_id)
    with transaction() as session:
        outcome = svc.request_score(session, session_id, force=force, triggered_by=principal.id)
    publish_components(outcome.refs)
    with transaction() as session:
        score = session.scalar(
            select(Score).where(Score.id == outcome.score_id).options(selectinload(Score.components), selectinload(Score.item))
        )
        assert score is not None
        view = _score_view(session, score, svc.current_hashes(session))
    headers = {"Location": f"{router.prefix}/scoring/sessions/{session_id}/score"}
    return JSONResponse(view, status_code=outcome.status_code, headers=headers)


@router.get(
    "/scoring/sessions/{session_id}/score",
    response_model=SessionScoreOut,
    responses={404: {"description": "Session not found or not yet scored"}},
    summary="The session's latest score (EP-0028)",
)
def get_session_score(session_id: SessionId, _: Annotated[Principal, Depends(require_principal)]) -> JSONResponse:
    _check_id(session_id)
    with transaction() as session:
        score = store.latest_score(session, session_id)
        if score is None:
            if store.session_exists(session, session_id):
                raise NotFound(f"session {session_id!r} has not been scored")
            raise NotFound(f"no session {session_id!r} is stored")
        return JSONResponse(_score_view(session, score, svc.current_hashes(session)))


# --- use cases --------------------------------------------------------------------------------------------


@router.get("/scoring/missing-tools", summary="Missing-tool analytics: normalised tool names, counts, sessions, rationales")
def missing_tools(
    _: Annotated[Principal, Depends(require_principal)],
    criteria_hash: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-f]{1,64}$")] = None,
    since: Annotated[datetime | None, Query(description="Scores completed at or after")] = None,
    until: Annotated[datetime | None, Query(description="Scores completed before")] = None,
    latest_only: Annotated[bool, Query(description="Only each session's latest completed score in the filters")] = True,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    examples: Annotated[int, Query(ge=0, le=20, description="Example rationales per tool")] = 3,
) -> dict[str, Any]:
    with transaction() as session:
        return analytics.missing_tools(
            session, criteria_hash=criteria_hash, since=since, until=until, latest_only=latest_only, limit=limit, examples=examples
        )


def _export(min_score: int, criteria_hash: str | None) -> Iterator[str]:
    session = new_session()
    try:
        for row in analytics.iter_training_data(session, min_score=min_score, criteria_hash=criteria_hash):
            yield json.dumps(row, ensure_ascii=False) + "\n"
    finally:
        session.close()


@router.get(
    "/scoring/training-data",
    summary="Training-data curation: sessions whose latest completed score is >= min_score (JSON page or JSONL export)",
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
def training_data(
    _: Annotated[Principal, Depends(require_principal)],
    min_score: Annotated[int, Query(ge=0, le=100)] = 85,
    criteria_hash: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-f]{1,64}$")] = None,
    format: Annotated[Literal["json", "jsonl"], Query(description="jsonl: every session with its content, streamed")] = "json",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Any:
    if format == "jsonl":
        return StreamingResponse(
            _export(min_score, criteria_hash),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="training-data-min{min_score}.jsonl"'},
        )
    with transaction() as session:
        page = analytics.training_data(session, min_score=min_score, criteria_hash=criteria_hash, limit=limit, offset=offset)
        return {
            "min_score": min_score,
            "criteria_hash": criteria_hash,
            "total": page.total,
            "limit": limit,
            "offset": offset,
            "sessions": [analytics.curated_view(r) for r in page.rows],
        }


@router.post(
    "/scoring/sessions/rescore",
    response_model=RescoreOut,
    status_code=202,
    summary="Re-score a set (unscored, stale or failed sessions) as one batch over the stored sessions",
    responses={
        200: {"model": RescoreOut, "description": "Nothing to score (or an Idempotency-Key replay)"},
        409: {"description": "A request with the same Idempotency-Key is still in progress"},
        422: {"description": "The Idempotency-Key was used for a different request"},
    },
)
def rescore(
    body: RescoreIn,
    principal: Annotated[Principal, Depends(require_principal)],
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=255,
            description="Names this request for retries: the same key (from the same principal) with the same "
            "select and limit returns the first batch; with anything else, 422.",
        ),
    ] = None,
) -> JSONResponse:
    idempotency = None
    if idempotency_key:
        request_asked = {"route": "POST /api/v1/scoring/sessions/rescore", "select": body.select, "limit": body.limit}
        idempotency = IdempotencyKey(idempotency_key, scope=principal.id, request=request_asked)
    with transaction() as session:
        result = svc.rescore(
            session, selection=body.select, triggered_by=principal.id, limit=body.limit, idempotency=idempotency
        )
        batch_id = result.batch.id if result.batch is not None else None
        out = RescoreOut(
            batch_id=str(batch_id) if batch_id else None,
            status=result.batch.status if result.batch is not None else None,
            suite=SUITE,
            criteria_hash=result.criteria_hash,
            select=body.select,
            selected=len(result.session_ids),
            skipped_in_flight=result.skipped_active,
            session_ids=result.session_ids[:1000],
            replayed=result.replayed,
        )
    if batch_id is not None and not result.replayed:
        start_planner(batch_id)
    headers = {"Location": f"/api/v1/batches/{batch_id}"} if batch_id else {}
    return JSONResponse(out.model_dump(), status_code=202 if batch_id and not result.replayed else 200, headers=headers)

