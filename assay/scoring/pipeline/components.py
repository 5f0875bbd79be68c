"""What the pipeline hands around: component references, the queues they travel on, a new score's
row, the tables hot-path statements use, and the sums of what calls used."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError
from assay.scoring.store.models import Score, ScoreComponent
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.loader import Criteria

# Hot-path statements go through the tables (SQLAlchemy Core): the ORM's bulk-update machinery costs
# more CPU than the round trip itself, several times per component.
COMPONENTS = ScoreComponent.__table__
SCORES = Score.__table__

METRICS_QUEUE = "metrics"
JUDGE_QUEUE = "judge"
# Online scores' components travel on queues of their own, which workers take from first (ARCHITECTURE.md,
# invariant 12); the queue a component row names is how everything downstream (the reconciler, a
# deferral, the governor) tells online work from batch work.
ONLINE_METRICS_QUEUE = "online-metrics"
ONLINE_JUDGE_QUEUE = "online-judge"
JUDGE_QUEUES = (JUDGE_QUEUE, ONLINE_JUDGE_QUEUE)
METRICS_QUEUES = (METRICS_QUEUE, ONLINE_METRICS_QUEUE)


@dataclass(frozen=True)
class ComponentRef:
    score_id: uuid.UUID
    component: str
    queue: str


class Enqueuer(Protocol):
    """Publishes component tasks; the workers layer implements it over Celery."""

    def enqueue(self, refs: Sequence[ComponentRef]) -> None: ...


def queue_for(criteria: Criteria, component: str, *, online: bool = False) -> str:
    """The queue of a component row: a judge's (a jury's members, and the jury they land) or a metric's."""
    spec = criteria.components.get(component)
    if spec is None or spec.is_judge:
        return ONLINE_JUDGE_QUEUE if online else JUDGE_QUEUE
    return ONLINE_METRICS_QUEUE if online else METRICS_QUEUE


def is_online(queue: str) -> bool:
    return queue in (ONLINE_METRICS_QUEUE, ONLINE_JUDGE_QUEUE)


# The reconciler may re-send a whole lost broker's worth at once: its scores are looked up in parts.
_HASHES_PER_QUERY = 5000


def judge_names(session: Session, refs: Sequence[ComponentRef]) -> dict[ComponentRef, str]:
    """The ``provider/model`` each judge-queue ref calls, from its score's criteria (one query for the
    scores' hashes per few thousand scores; the criteria are cached per hash). A ref that makes no
    call of its own (a jury) or whose score is gone is left out."""
    judged = [ref for ref in refs if ref.queue in JUDGE_QUEUES]
    if not judged:
        return {}
    score_ids = list({ref.score_id for ref in judged})
    hashes: dict[uuid.UUID, str] = {}
    for start in range(0, len(score_ids), _HASHES_PER_QUERY):
        chunk = score_ids[start : start + _HASHES_PER_QUERY]
        rows = session.execute(select(Score.id, Score.criteria_hash).where(Score.id.in_(chunk)))
        hashes.update({row.id: row.criteria_hash for row in rows})
    named: dict[ComponentRef, str] = {}
    names: dict[tuple[str, str], str | None] = {}  # (criteria hash, component): a group repeats them
    for ref in judged:
        criteria_hash = hashes.get(ref.score_id)
        if criteria_hash is None:
            continue
        key = (criteria_hash, ref.component)
        if key not in names:
            names[key] = _judge_name(session, criteria_hash, ref.component)
        if names[key] is not None:
            named[ref] = names[key]
    return named


def _judge_name(session: Session, criteria_hash: str, component: str) -> str | None:
    try:
        judge = load_criteria(session, criteria_hash).judge_for(component)
    except AssayError:  # a jury (its members make the calls), or criteria no longer stored
        return None
    return f"{judge.provider}/{judge.model}"


def pending_score(
    *,
    item_id: uuid.UUID,
    suite: str,
    criteria_hash: str,
    criteria: Criteria,
    triggered_by: str,
    created_at: datetime,
    batch_id: uuid.UUID | None = None,
    position: int = 0,
) -> dict[str, Any]:
    """The column values of a new score, waiting to be planned (every way a score is made uses it)."""
    return dict(
        id=uuid.uuid4(),
        item_id=item_id,
        batch_id=batch_id,
        position=position,
        suite_name=suite,
        criteria_hash=criteria_hash,
        status="pending",
        partial=False,
        components_total=len(criteria.rows),
        components_landed=0,
        cost_usd=0.0,
        triggered_by=triggered_by[:255],
        created_at=created_at,
    )


def cache_read_ratio(usage: dict[str, int]) -> float | None:
    """Share of prompt tokens served from the prompt cache."""
    prompt = sum(usage.get(k, 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    return round(usage.get("cache_read_input_tokens", 0) / prompt, 6) if prompt else None


def sum_usage(usages: Any) -> dict[str, int]:
    total: Counter[str] = Counter()
    for usage in usages:
        if usage:
            total.update({k: int(v) for k, v in usage.items() if isinstance(v, int | float)})
    return dict(total)
