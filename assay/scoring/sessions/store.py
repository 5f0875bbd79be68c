"""Sessions on the one store.

A session is an item of kind ``alert_session`` whose ``external_id`` is the session id. Posting a
session again updates it:

- the same content (same ``content_hash``): nothing changes;
- new content, and no score was made from the stored content yet: the item is updated in place;
- new content, and a score was made from the stored content: a new item (a new *version*) is added
  and becomes the session's current one. The old item keeps its scores, so a score always names the
  content it judged; scores are history and are never rewritten.

The session's *current* item is its newest; its *latest score* is the newest score of any of its
items (batch uploads of sessions add items under the same session id too). Services flush; callers
commit.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session, selectinload

from assay.scoring.errors import InvalidInput
from assay.scoring.intake.ingest import contains_nul, item_content_hash
from assay.scoring.sessions.items import (
    KIND_NAME,
    AlertSessionItem,
    normalize_tool_name,
)
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import Item, Score, utcnow
from assay.scoring.store.session_models import (
    AlternativeApproachRow,
    AlternativeApproachStepRow,
    MissingToolRow,
)
from assay.scoring.suites.loader import canonical_json

NAME_LENGTH = 255


def lock_session(session: Session, session_id: str) -> None:
    """Serialise writers of one session (Postgres advisory lock, released at commit). SQLite
    serialises writers by itself."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": f"{KIND_NAME}:{session_id}"})


def session_items(session_id: str):  # type: ignore[no-untyped-def]
    return select(Item.id).where(Item.kind == KIND_NAME, Item.external_id == session_id)


def current_item(session: Session, session_id: str) -> Item | None:
    return session.scalar(
        select(Item)
        .where(Item.kind == KIND_NAME, Item.external_id == session_id)
        .order_by(Item.created_at.desc(), Item.id.desc())
        .limit(1)
    )


def session_exists(session: Session, session_id: str) -> bool:
    return session.scalar(select(func.count()).select_from(session_items(session_id).limit(1).subquery())) > 0


def latest_score(session: Session, session_id: str) -> Score | None:
    return session.scalar(
        select(Score)
        .where(Score.item_id.in_(session_items(session_id)), machine_scores())
        .options(selectinload(Score.components), selectinload(Score.item))
        .order_by(Score.created_at.desc(), Score.id.desc())
        .limit(1)
    )


def active_score(session: Session, session_id: str) -> Score | None:
    return session.scalar(
        select(Score)
        .where(Score.item_id.in_(session_items(session_id)), Score.status.in_(("pending", "in_progress")), machine_scores())
        .order_by(Score.created_at.desc())
        .limit(1)
    )


def session_payload(item: AlertSessionItem) -> tuple[dict[str, Any], str]:
    """The stored payload and its content hash; refuses what the store cannot hold."""
    payload = item.model_dump(mode="json", exclude_none=True)
    if contains_nul(payload):
        raise InvalidInput("the session contains a NUL character (\\u0000), which the store cannot hold")
    try:
        payload_json = canonical_json(payload)
    except ValueError as exc:  # NaN or infinity: not JSON
        raise InvalidInput(f"the session holds a value JSON cannot carry: {exc}") from None
    return payload, item_content_hash(payload_json)


@dataclass(frozen=True)
class Stored:
    item: Item
    outcome: str  # "created", "updated" (in place), "versioned" (a new item) or "unchanged"

    @property
    def created(self) -> bool:
        return self.outcome == "created"


def store_session(session: Session, item: AlertSessionItem) -> Stored:
    """Store a session, or update the stored one (see the module docstring)."""
    payload, content_hash = session_payload(item)
    lock_session(session, item.session_id)
    current = current_item(session, item.session_id)
    if current is not None and current.content_hash == content_hash:
        return Stored(current, "unchanged")
    if current is not None:
        scored = session.scalar(select(func.count()).where(Score.item_id == current.id))
        if not scored:
            current.payload = payload
            current.content_hash = content_hash
            session.flush()
            return Stored(current, "updated")
    row = Item(
        id=uuid.uuid4(),
        kind=KIND_NAME,
        external_id=item.session_id,
        payload=payload,
        content_hash=content_hash,
        dataset_hash=None,
        origin_batch_id=None,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return Stored(row, "created" if current is None else "versioned")


# --- feedback rows ------------------------------------------------------------------------------------


def write_feedback(session: Session, score_id: uuid.UUID, details: dict[str, Any]) -> None:
    """The verdict's missing tools and alternative approaches (with steps) as rows, in their order.
    Idempotent: a score's earlier rows are replaced."""
    session.execute(delete(MissingToolRow).where(MissingToolRow.score_id == score_id))
    session.execute(delete(AlternativeApproachRow).where(AlternativeApproachRow.score_id == score_id))
    for position, tool in enumerate(details.get("missing_tools") or [], start=1):
        name = str(tool.get("tool_name", ""))
        session.add(
            MissingToolRow(
                id=uuid.uuid4(),
                score_id=score_id,
                position=position,
                tool_name=name[:NAME_LENGTH],
                normalized_name=normalize_tool_name(name)[:NAME_LENGTH],
                rationale=str(tool.get("rationale", "")),
            )
        )
    for position, approach in enumerate(details.get("alternative_approaches") or [], start=1):
        row = AlternativeApproachRow(
            id=uuid.uuid4(),
            score_id=score_id,
            position=position,
            name=str(approach.get("name", ""))[:NAME_LENGTH],
            description=str(approach.get("description", "")),
        )
        row.steps = [
            AlternativeApproachStepRow(id=uuid.uuid4(), step_order=order, step_description=str(step))
            for order, step in enumerate(approach.get("steps") or [], start=1)
        ]
        session.add(row)
    session.flush()


@dataclass
class Feedback:
    missing_tools: list[dict[str, Any]]
    alternative_approaches: list[dict[str, Any]]


def feedback_for(session: Session, score_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Feedback]:
    """The stored feedback of each score, in the verdict's order."""
    ids = list(score_ids)
    out = {score_id: Feedback([], []) for score_id in ids}
    if not ids:
        return out
    for row in session.scalars(
        select(MissingToolRow).where(MissingToolRow.score_id.in_(ids)).order_by(MissingToolRow.score_id, MissingToolRow.position)
    ):
        out[row.score_id].missing_tools.append({"tool_name": row.tool_name, "rationale": row.rationale})
    for row in session.scalars(
        select(AlternativeApproachRow)
        .where(AlternativeApproachRow.score_id.in_(ids))
        .options(selectinload(AlternativeApproachRow.steps))
        .order_by(AlternativeApproachRow.score_id, AlternativeApproachRow.position)
    ):
        out[row.score_id].alternative_approaches.append(
            {"name": row.name, "description": row.description, "steps": [s.step_description for s in row.steps]}
        )
    return out


def percent(total: float | None) -> int | None:
    """``total`` in [0, 1] as the EP's integer 0-100, rounded half up (as the ``session_scores`` view)."""
    return None if total is None else math.floor(100 * total + 0.5 + 1e-9)
