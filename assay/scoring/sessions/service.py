"""The rules of scoring a session, re-scoring a set, and listing sessions. Services flush; callers
commit and then publish the returned component refs (or start the batch planner).

``POST /api/v1/scoring/sessions/{session_id}/score`` (:func:`request_score`):

- unknown session: 404 (the route first tries the history service, when one is configured);
- without ``force_rescore``: the session's latest score is returned whatever its status or criteria:
  200 when finished (completed, failed, timed_out, cancelled; ``is_current_criteria`` says whether it
  is stale), 202 while pending or in progress. Only when the session has no score is one created
  under the current criteria and enqueued (202);
- with ``force_rescore``: a new score under the current criteria is created (202), or 409 while one
  is pending or in progress;
- a score is created only for a completed session (400 otherwise), and only while the suite is
  enabled (409 with ``SCORING_ENABLED=false``, as every disabled suite: it takes no new work).

A stuck score (a lost message, a dead worker) is recovered by the reconciler, which re-enqueues its
components; it never blocks re-scoring forever.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import and_, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from assay.scoring.errors import BadRequest, Conflict, NotFound
from assay.scoring.intake.idempotency import IdempotencyKey, batch_for, check_retry, hold
from assay.scoring.pipeline.components import ComponentRef, pending_score
from assay.scoring.pipeline.planning import create_components
from assay.scoring.sessions import SUITE
from assay.scoring.sessions.items import COMPLETED, KIND_NAME
from assay.scoring.sessions.store import (
    active_score,
    current_item,
    latest_score,
    lock_session,
)
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    Batch,
    Item,
    Score,
    SuiteRecord,
    utcnow,
)
from assay.scoring.suites.criteria import current_suite, load_criteria


@dataclass
class ScoreRequest:
    status_code: int  # 200: a finished score; 202: pending / in progress / just created
    score_id: uuid.UUID
    created: bool
    refs: list[ComponentRef] = field(default_factory=list)


def new_score(
    session: Session, item_id: uuid.UUID, record: SuiteRecord, triggered_by: str, *, batch_id: uuid.UUID | None = None, position: int = 0
) -> Score:
    criteria = load_criteria(session, record.current_criteria_hash)
    score = Score(
        **pending_score(
            item_id=item_id,
            suite=record.name,
            criteria_hash=record.current_criteria_hash,
            criteria=criteria,
            triggered_by=triggered_by,
            created_at=utcnow(),
            batch_id=batch_id,
            position=position,
        )
    )
    session.add(score)
    return score


def request_score(
    session: Session, session_id: str, *, force: bool, triggered_by: str, suite: str = SUITE
) -> ScoreRequest:
    lock_session(session, session_id)
    item = current_item(session, session_id)
    if item is None:
        raise NotFound(f"no session {session_id!r} is stored")
    if not force:
        latest = latest_score(session, session_id)
        if latest is not None:
            return ScoreRequest(202 if latest.status in ACTIVE_SCORE_STATUSES else 200, latest.id, created=False)
    status = (item.payload or {}).get("status")
    if status != COMPLETED:
        raise BadRequest(
            f"session {session_id!r} is {status!r}, not completed: only a completed session can be scored",
            session_status=status,
        )
    if force:
        active = active_score(session, session_id)
        if active is not None:
            raise Conflict(
                f"session {session_id!r} already has a score {active.status} ({active.id}); "
                "wait for it to finish before forcing a re-score",
                score_id=str(active.id),
                score_status=active.status,
            )
    record = current_suite(session, suite)  # 409 while the suite is disabled
    score = new_score(session, item.id, record, triggered_by)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        # Another request (a re-score batch) made the same score meanwhile.
        raise Conflict(f"session {session_id!r} already has a score pending under the current criteria") from None
    refs = create_components(session, [(score.id, score.criteria_hash)], score.created_at)
    return ScoreRequest(202, score.id, created=True, refs=refs)


# --- listing ---------------------------------------------------------------------------------------------

ScoringFilter = Literal["scored", "not_scored", "failed", "scoring"]
SessionSort = Literal["recent", "score_desc", "score_asc"]


def _current_items():  # type: ignore[no-untyped-def]
    return (
        select(
            Item.id.label("item_id"),
            Item.external_id.label("session_id"),
            Item.content_hash.label("content_hash"),
            Item.created_at.label("stored_at"),
            Item.payload["status"].as_string().label("status"),
            Item.payload["alert_type"].as_string().label("alert_type"),
            Item.payload["started_at"].as_string().label("started_at"),
            Item.payload["ended_at"].as_string().label("ended_at"),
            func.row_number()
            .over(partition_by=Item.external_id, order_by=(Item.created_at.desc(), Item.id.desc()))
            .label("rn"),
        )
        .where(Item.kind == KIND_NAME, Item.external_id.is_not(None))
        .subquery("current_items")
    )


def _latest_scores():  # type: ignore[no-untyped-def]
    return (
        select(
            Item.external_id.label("session_id"),
            Score.id.label("score_id"),
            Score.status.label("score_status"),
            Score.total.label("total"),
            Score.criteria_hash.label("criteria_hash"),
            Score.suite_name.label("suite_name"),
            Score.completed_at.label("completed_at"),
            Score.error_message.label("error_message"),
            func.row_number()
            .over(partition_by=Item.external_id, order_by=(Score.created_at.desc(), Score.id.desc()))
            .label("rn"),
        )
        .join(Item, Item.id == Score.item_id)
        .where(Item.kind == KIND_NAME, Item.external_id.is_not(None), machine_scores())
        .subquery("latest_scores")
    )


def sessions_query(*, scoring: ScoringFilter | None = None, min_score: int | None = None, status: str | None = None):  # type: ignore[no-untyped-def]
    """Each session's current item joined to its latest score (if any), filtered."""
    cur, lat = _current_items(), _latest_scores()
    query = (
        select(cur, lat.c.score_id, lat.c.score_status, lat.c.total, lat.c.criteria_hash, lat.c.suite_name,
               lat.c.completed_at, lat.c.error_message)
        .select_from(cur)
        .outerjoin(lat, and_(lat.c.session_id == cur.c.session_id, lat.c.rn == 1))
        .where(cur.c.rn == 1)
    )
    if status is not None:
        query = query.where(cur.c.status == status.strip().lower())
    if scoring == "scored":
        query = query.where(lat.c.score_status == "completed")
    elif scoring == "not_scored":
        query = query.where(lat.c.score_id.is_(None))
    elif scoring == "failed":
        query = query.where(lat.c.score_status.in_(("failed", "timed_out")))
    elif scoring == "scoring":
        query = query.where(lat.c.score_status.in_(ACTIVE_SCORE_STATUSES))
    if min_score is not None:
        query = query.where(lat.c.score_status == "completed", lat.c.total >= min_score / 100 - 0.005)
    return query, cur, lat


def list_sessions(
    session: Session,
    *,
    scoring: ScoringFilter | None,
    min_score: int | None,
    status: str | None,
    sort: SessionSort,
    limit: int,
    offset: int,
) -> tuple[int, list[Any]]:
    query, cur, lat = sessions_query(scoring=scoring, min_score=min_score, status=status)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    if sort == "score_desc":
        order = (lat.c.total.desc().nulls_last(), cur.c.stored_at.desc(), cur.c.session_id)
    elif sort == "score_asc":
        order = (lat.c.total.asc().nulls_last(), cur.c.stored_at.desc(), cur.c.session_id)
    else:
        order = (cur.c.stored_at.desc(), cur.c.session_id)
    rows = session.execute(query.order_by(*order).limit(limit).offset(offset)).all()
    return total, list(rows)


def current_hashes(session: Session) -> dict[str, str]:
    return {s.name: s.current_criteria_hash for s in session.scalars(select(SuiteRecord))}


# --- re-scoring a set ------------------------------------------------------------------------------------

RescoreSelection = Literal["unscored", "stale", "failed"]


@dataclass
class Rescore:
    batch: Batch | None
    criteria_hash: str
    session_ids: list[str]
    skipped_active: int
    replayed: bool = False


def rescore(
    session: Session,
    *,
    selection: RescoreSelection,
    triggered_by: str,
    limit: int | None = None,
    idempotency: IdempotencyKey | None = None,
    suite: str = SUITE,
) -> Rescore:
    """One batch over existing items: the current item of every completed session that is
    ``unscored`` (no score at all), ``stale`` (latest score finished under another criteria hash)
    or ``failed`` (latest score failed or timed out). Sessions with a score in flight are skipped.
    The caller commits and starts the batch's planner. With an Idempotency-Key, a retry (same
    principal, same selection and limit) gets the first batch back; another request with the key, 422."""
    fingerprint = None
    if idempotency is not None:
        fingerprint = idempotency.fingerprint()
        hold(session, idempotency)
        existing = batch_for(session, idempotency)
        if existing is not None:
            check_retry(existing, idempotency, fingerprint)
            ids = [
                sid
                for (sid,) in session.execute(
                    select(Item.external_id).join(Score, Score.item_id == Item.id).where(Score.batch_id == existing.id).order_by(Score.position)
                )
            ]
            return Rescore(existing, existing.criteria_hash, ids, 0, replayed=True)
    record = current_suite(session, suite)  # 409 while the suite is disabled
    current = record.current_criteria_hash
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy import text

        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": f"{KIND_NAME}:rescore"})
    query, cur, _ = sessions_query(status=COMPLETED)
    rows = session.execute(query.order_by(cur.c.stored_at, cur.c.session_id)).all()
    chosen: list[Any] = []
    skipped = 0
    for row in rows:
        if row.score_status in ACTIVE_SCORE_STATUSES:
            skipped += 1
            continue
        if selection == "unscored":
            wanted = row.score_id is None
        elif selection == "stale":
            wanted = row.score_id is not None and row.criteria_hash != current
        else:
            wanted = row.score_status in ("failed", "timed_out")
        if wanted:
            chosen.append(row)
    if limit is not None:
        chosen = chosen[:limit]
    if not chosen:
        return Rescore(None, current, [], skipped)
    batch = Batch(
        id=uuid.uuid4(),
        suite_name=record.name,
        criteria_hash=current,
        status="planning",
        idempotency_key=idempotency.key if idempotency is not None else None,
        idempotency_scope=idempotency.scope if idempotency is not None else None,
        idempotency_fingerprint=fingerprint,
        created_by=triggered_by[:255],
        total_items=len(chosen),
        planned_position=-1,
        summary={"rescore": selection},
        created_at=utcnow(),
    )
    session.add(batch)
    session.flush()
    for position, row in enumerate(chosen, start=1):
        new_score(session, row.item_id, record, triggered_by, batch_id=batch.id, position=position)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        raise Conflict("a session of the set got a score meanwhile; try again") from None
    return Rescore(batch, current, [row.session_id for row in chosen], skipped)
