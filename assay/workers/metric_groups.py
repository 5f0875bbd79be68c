"""The deterministic path: one task computes every metric component of a group of scores.

The enqueuer sends a score's metric components together, ``metric_group_size`` scores per message.
The task claims the whole group in one statement, reads the scores' work in one query and validates
each item once (its components share it), computes the components one after another in its own
thread, and lands what finished in one transaction with set-based writes (which finalizes, in the same
transaction, the scores whose last component landed). Results land at least every
``LAND_EVERY_SECONDS`` (and after each component that took longer): a killed worker loses at most
that much finished work besides the component in flight, and slow items (pandas, seconds each) land
one by one. Each component starts only while its lease is certainly held (the lease keeper's
heartbeat renews the group's leases while the task runs), so a group never outlives its leases.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from assay import observability
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.claims import Claim, claim_many, defer
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.scorer import WorkUnit, compute
from assay.scoring.store.db import after_commits_gathered, transaction
from assay.settings import get_settings
from assay.workers.app import Queue
from assay.workers.landing import claimed_works, defer_component, land_results
from assay.workers.leases import lease_keeper

log = logging.getLogger(__name__)

# Finished results wait at most this long for the next ones before landing together.
LAND_EVERY_SECONDS = 1.0
# How often a batch group asks whether online work is waiting (an LLEN pipeline on the broker).
ONLINE_CHECK_SECONDS = 0.5
HANDED_BACK = "handed back unstarted: online work was waiting for this worker"

Enqueue = Callable[..., None]  # CeleryEnqueuer.enqueue(refs, countdown=...)


def group_refs(pairs: Sequence[Sequence[str]], queue: str = Queue.METRICS.value) -> list[ComponentRef]:
    """A task's ``[[score_id, component], ...]`` as refs on ``queue``, duplicates dropped, order kept."""
    return list(dict.fromkeys(ComponentRef(uuid.UUID(score_id), component, queue) for score_id, component in pairs))


def describe_group(group_id: str, refs: Sequence[ComponentRef], judges: Mapping[ComponentRef, str], shown: int = 3) -> str:
    """What Flower shows of a group task: its id, its size, its first components and, for judge
    components, the providers and models they call (``judges``: ``provider/model`` by ref)."""
    first = ", ".join(f"score {str(ref.score_id)[:8]}/{ref.component}" for ref in refs[:shown])
    more = ", …" if len(refs) > shown else ""
    noun = "component" if len(refs) == 1 else "components"
    called = sorted({judges[ref] for ref in refs if ref in judges})
    calls = f" judged by {', '.join(called)}" if called else ""
    return f"group {group_id}: {len(refs)} {noun} ({first}{more}){calls}"


def new_group_id() -> str:
    return uuid.uuid4().hex[:8]


def metric_groups(refs: Sequence[ComponentRef], scores_per_group: int) -> list[list[ComponentRef]]:
    """Metric refs in groups of ``scores_per_group`` scores, each score's components together."""
    by_score: dict[uuid.UUID, list[ComponentRef]] = {}
    for ref in refs:
        by_score.setdefault(ref.score_id, []).append(ref)
    scores = list(by_score.values())
    return [
        [ref for score in scores[start : start + scores_per_group] for ref in score]
        for start in range(0, len(scores), scores_per_group)
    ]


def _outcome(work: WorkUnit) -> ComponentResult | Exception:
    try:
        return compute(work, None)
    except Exception as exc:  # compute fails a metric's own errors; anything else is infrastructure
        log.exception("component %s of score %s raised", work.ref.component, work.ref.score_id)
        return exc


def _hand_back(refs: Sequence[ComponentRef], owner: str, claims: dict[ComponentRef, Claim], enqueue: Enqueue) -> None:
    """Unstarted components back to their queue at once, no attempt spent: a new message takes them."""
    with transaction() as session:
        for ref in refs:
            defer(session, ref, owner, 0.0, HANDED_BACK, claim=claims[ref])
    enqueue(list(refs))


def run_metric_group(
    task_id: str | None,
    pairs: Sequence[Sequence[str]],
    enqueue: Enqueue,
    queue: str = Queue.METRICS.value,
    online_waiting: Callable[[], bool] | None = None,
) -> None:
    """Claim, compute and land a group of metric components (see the module's docstring); ``queue``: the
    one they came on (metrics or online-metrics), where a retry sends them again.

    ``online_waiting`` (batch groups): asked between components, every ``ONLINE_CHECK_SECONDS`` at
    most; when it says online work waits, the group lands what it finished and hands the rest back to
    its queue, so the process takes the online message next (its queue is served first) instead of
    after the whole group: an online item waits for one batch component, not for a batch group."""
    refs = group_refs(pairs, queue)
    owner = task_id or uuid.uuid4().hex
    lease = get_settings().metrics_lease_seconds
    # Whether a finished score completed its batch is asked once the group is done, not per landing.
    with after_commits_gathered():
        # One transaction claims and reads the work; it commits (the leases are visible) before computing.
        with transaction() as session:
            claims = claim_many(session, refs, owner, lease)
            works = claimed_works(session, refs, claims, owner)
        busy = [(ref, claim.retry_in) for ref, claim in claims.items() if claim.state == "busy"]
        if busy:
            enqueue([ref for ref, _ in busy], countdown=max(retry_in for _, retry_in in busy))
        keeper = lease_keeper()
        finished: dict[ComponentRef, ComponentResult] = {}

        def land() -> None:
            if finished:
                land_results(finished, claims, {ref.score_id: works[ref].item for ref in finished})
                for ref, result in finished.items():
                    observability.component_landed(queue, ref.component, result.status)
                finished.clear()

        # The process's heartbeat renews these leases while this task runs them, and no longer.
        with keeper.holding(owner, works, lease):
            landed_at = checked_at = time.monotonic()
            pending = list(works.items())
            for index, (ref, work) in enumerate(pending):
                # Never before the first component: a group that is handed back has made progress.
                if online_waiting is not None and index and time.monotonic() - checked_at >= ONLINE_CHECK_SECONDS:
                    checked_at = time.monotonic()
                    if online_waiting():
                        land()
                        _hand_back([later for later, _ in pending[index:]], owner, claims, enqueue)
                        observability.task_retried(queue, "handed_back")
                        break
                if not keeper.holds(owner, ref):
                    log.warning(
                        "component %s of score %s not started: its lease may have run out (the heartbeat could "
                        "not renew it) or been taken over; it is left to whoever holds it now", ref.component, ref.score_id,
                    )
                    continue
                outcome = _outcome(work)
                if isinstance(outcome, Exception):
                    land()  # what finished before lands first
                    # Infrastructure trouble: retry later, spending an attempt.
                    backoff = min(300.0, 5.0 * 2 ** min(claims[ref].attempts, 6))
                    reason = f"{type(outcome).__name__}: {outcome}"
                    defer_component(ref, owner, backoff, reason, spend_attempt=True, claim=claims[ref])
                    observability.task_retried(queue, "error")
                    enqueue([ref], countdown=backoff)
                    continue
                finished[ref] = outcome
                if time.monotonic() - landed_at >= LAND_EVERY_SECONDS:
                    land()
                    landed_at = time.monotonic()
            land()
