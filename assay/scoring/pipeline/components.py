"""What the pipeline hands around: component references, the queues they travel on, a new score's
row, the tables hot-path statements use, and the sums of what calls used."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from assay.scoring.store.models import Score, ScoreComponent
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
    # A judge component's ``provider/model``, when the publisher knows it: named in what Flower shows
    # of the task (``argsrepr``). Not part of the identity: two refs to one component are equal.
    judge: str | None = field(default=None, compare=False)


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
