"""The use cases EP-0028 names: MCP-server prioritisation from missing tools, and training-data curation.

Both read completed scores only, and by default each session's *latest* completed score within the
filters, so a session re-scored three times counts once (``latest_only=False``: every score).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, exists, func, select
from sqlalchemy.orm import Session

from assay.scoring.reports.views import iso
from assay.scoring.sessions.items import KIND_NAME
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import Item, Score
from assay.scoring.store.session_models import MissingToolRow, session_scores


def _scores(criteria_hash: str | None, since: datetime | None, until: datetime | None, latest_only: bool):  # type: ignore[no-untyped-def]
    """Completed alert_session scores in the filters: (score_id, session_id, completed_at)."""
    query = (
        select(
            Score.id.label("score_id"),
            Item.external_id.label("session_id"),
            Score.completed_at.label("completed_at"),
            func.row_number()
            .over(partition_by=Item.external_id, order_by=(Score.completed_at.desc(), Score.id.desc()))
            .label("rn"),
        )
        .join(Item, Item.id == Score.item_id)
        .where(Item.kind == KIND_NAME, Score.status == "completed", machine_scores())
    )
    if criteria_hash:
        query = query.where(Score.criteria_hash == criteria_hash)
    if since is not None:
        query = query.where(Score.completed_at >= since)
    if until is not None:
        query = query.where(Score.completed_at < until)
    sub = query.subquery("considered")
    return select(sub).where(sub.c.rn == 1).subquery("chosen") if latest_only else sub


def missing_tools(
    session: Session,
    *,
    criteria_hash: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    latest_only: bool = True,
    limit: int = 50,
    examples: int = 3,
    max_sessions: int = 100,
) -> dict[str, Any]:
    """Missing tools grouped by normalised name, most frequent first. ``count`` is the number of
    scores naming the tool (a tool named twice in one verdict counts once); ``sessions`` the
    sessions whose scores name it; ``examples`` the first rationales, with where they come from."""
    chosen = _scores(criteria_hash, since, until, latest_only)
    considered = session.execute(select(func.count(), func.count(func.distinct(chosen.c.session_id))).select_from(chosen)).one()
    rows = session.execute(
        select(
            MissingToolRow.normalized_name,
            MissingToolRow.tool_name,
            MissingToolRow.rationale,
            chosen.c.score_id,
            chosen.c.session_id,
        )
        .join(chosen, chosen.c.score_id == MissingToolRow.score_id)
        .order_by(chosen.c.completed_at.desc(), chosen.c.score_id, MissingToolRow.position)
    ).all()
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        group = groups.setdefault(
            row.normalized_name,
            {"tool_name": row.normalized_name, "names": {}, "scores": set(), "sessions": {}, "examples": []},
        )
        group["names"][row.tool_name] = None
        group["scores"].add(row.score_id)
        group["sessions"][row.session_id] = None
        if len(group["examples"]) < examples:
            group["examples"].append({"session_id": row.session_id, "score_id": str(row.score_id), "rationale": row.rationale})
    tools = [
        {
            "tool_name": name,
            "names": list(g["names"]),
            "count": len(g["scores"]),
            "session_count": len(g["sessions"]),
            "sessions": sorted(g["sessions"])[:max_sessions],
            "examples": g["examples"],
        }
        for name, g in groups.items()
    ]
    tools.sort(key=lambda t: (-t["count"], t["tool_name"]))
    return {
        "criteria_hash": criteria_hash,
        "since": iso(since),
        "until": iso(until),
        "latest_only": latest_only,
        "scores_considered": considered[0],
        "sessions_considered": considered[1],
        "tools": tools[:limit],
    }


# --- training data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Curated:
    total: int
    rows: list[Any]


def _curation_query(min_score: int, criteria_hash: str | None) -> Select[Any]:
    """Over the ``session_scores`` view: each session's latest completed score, at or over ``min_score``."""
    view = session_scores
    ranked = select(
        view,
        func.row_number().over(partition_by=view.c.session_id, order_by=(view.c.scored_at.desc(), view.c.score_id.desc())).label("rn"),
    )
    # The view reads every completed score: calibration repeats are no training verdicts.
    ranked = ranked.where(exists().where(Score.id == view.c.score_id, machine_scores()))
    if criteria_hash:
        ranked = ranked.where(view.c.criteria_hash == criteria_hash)
    sub = ranked.subquery("ranked")
    return select(sub).where(sub.c.rn == 1, sub.c.total_score >= min_score)


def training_data(
    session: Session, *, min_score: int, criteria_hash: str | None, limit: int, offset: int
) -> Curated:
    query = _curation_query(min_score, criteria_hash)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    sub = query.subquery("curated")
    rows = session.execute(
        select(sub).order_by(sub.c.total_score.desc(), sub.c.scored_at.desc(), sub.c.session_id).limit(limit).offset(offset)
    ).all()
    return Curated(total, list(rows))


def iter_training_data(session: Session, *, min_score: int, criteria_hash: str | None, chunk: int = 200) -> Iterator[dict[str, Any]]:
    """Every curated session with the stored session itself (the content its score judged), for JSONL."""
    offset = 0
    while True:
        page = training_data(session, min_score=min_score, criteria_hash=criteria_hash, limit=chunk, offset=offset)
        if not page.rows:
            return
        payloads = dict(
            session.execute(
                select(Score.id, Item.payload).join(Item, Item.id == Score.item_id).where(Score.id.in_([r.score_id for r in page.rows]))
            ).all()
        )
        for row in page.rows:
            yield {**curated_view(row), "session": payloads.get(row.score_id)}
        offset += chunk
        session.expunge_all()


def curated_view(row: Any) -> dict[str, Any]:
    breakdown = row.score_breakdown
    if isinstance(breakdown, str):  # SQLite's json_extract hands back text
        import json

        breakdown = json.loads(breakdown)
    return {
        "session_id": row.session_id,
        "score_id": str(row.score_id),
        "criteria_hash": row.criteria_hash,
        "total_score": row.total_score,
        "score_breakdown": breakdown,
        "score_reasoning": row.score_reasoning,
        "scored_triggered_by": row.scored_triggered_by,
        "scored_at": iso(row.scored_at),
    }
