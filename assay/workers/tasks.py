"""Tasks: thin adapters that take ids, call one service function each, and own the transaction.

Publishing happens only after the transaction that made the work visible has committed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError, OperationalError
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from assay import observability
from assay.scoring import pipeline
from assay.scoring.criteria import register_all_suites
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline import ComponentRef
from assay.scoring.scorer import compute, load_work
from assay.scoring.store.db import transaction
from assay.settings import get_settings
from assay.workers.app import Queue, app, task
from assay.workers.runtime import judge_runtime

log = logging.getLogger(__name__)

# Retry a store write through a short outage (Postgres restart) rather than lose paid work.
_store_retry = retry(
    retry=retry_if_exception_type((OperationalError, DBAPIError)),
    wait=wait_exponential(multiplier=0.5, max=10),
    stop=stop_after_delay(180),
    reraise=True,
)


class CeleryEnqueuer:
    """Publishes component tasks to their queues."""

    def enqueue(self, refs: Sequence[ComponentRef], countdown: float | None = None) -> None:
        if not refs:
            return
        with app.producer_or_acquire() as producer:
            for ref in refs:
                target = judge_component if ref.queue == Queue.JUDGE else metric_component
                target.apply_async(
                    args=(str(ref.score_id), ref.component), countdown=countdown, producer=producer
                )


enqueuer = CeleryEnqueuer()


def queue_depth(queue: str) -> int:
    with app.connection_for_write() as conn:
        try:
            return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
        except Exception:  # a queue Redis has not seen yet (or lost on restart) holds nothing
            return 0


@task("scoring.plan_batch", Queue.CONTROL, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=None)
def plan_batch(self, batch_id: str, chunks_per_run: int = 20) -> None:
    """Enqueue a batch's components in chunks, pausing while the queues are deep (backpressure)."""
    settings = get_settings()
    for _ in range(chunks_per_run):
        if max(queue_depth(Queue.METRICS), queue_depth(Queue.JUDGE)) > settings.max_queue_depth:
            with transaction() as session:
                pipeline.note_planner_waiting(session, uuid.UUID(batch_id))
            plan_batch.apply_async(args=(batch_id,), countdown=2.0)
            return
        with transaction() as session:
            step = pipeline.plan_chunk(session, uuid.UUID(batch_id), settings.plan_chunk_size)
        enqueuer.enqueue(step.refs)
        if step.finished:
            return
    # Keep each run short so a killed planner loses little; the batch row says where to resume.
    plan_batch.apply_async(args=(batch_id,))


def _run_component(task_self, score_id: str, component: str, queue: Queue) -> None:  # type: ignore[no-untyped-def]
    from assay.scoring.judge.service import JudgeDeferred

    settings = get_settings()
    ref = ComponentRef(uuid.UUID(score_id), component, queue.value)
    owner = task_self.request.id or uuid.uuid4().hex
    lease = settings.judge_lease_seconds if queue == Queue.JUDGE else settings.metrics_lease_seconds
    with transaction() as session:
        claim = pipeline.claim(session, ref, owner, lease)
        if claim.state == "claimed" and pipeline.expire_poison(session, ref, claim.attempts, settings.max_component_attempts):
            return
    if claim.state == "busy":
        enqueuer.enqueue([ref], countdown=claim.retry_in)
        return
    if claim.state != "claimed":
        return  # landed already (a duplicate delivery) or gone (deleted batch): nothing to do
    with transaction() as session:
        work = load_work(session, ref)
    if work is None:
        return
    try:
        result = compute(work, judge_runtime() if queue == Queue.JUDGE else None)
    except JudgeDeferred as deferred:
        _defer(
            ref, owner, deferred.retry_in, deferred.reason, usage=deferred.usage, cost_usd=deferred.cost_usd, claim=claim
        )
        # A Celery retry (same task id, shown as RETRY with the reason in Flower), not a failure; a
        # deferral spends none of the component's attempts, so an outage of any length is waited out.
        observability.task_retried(queue, "deferred")
        raise task_self.retry(countdown=deferred.retry_in, max_retries=None, exc=deferred)
    except Exception as exc:  # infrastructure trouble (Redis down, ...): retry later, spending an attempt
        log.exception("component %s of score %s raised", component, score_id)
        backoff = min(300.0, 5.0 * 2 ** min(claim.attempts, 6))
        _defer(ref, owner, backoff, f"{type(exc).__name__}: {exc}", spend_attempt=True, claim=claim)
        observability.task_retried(queue, "error")
        enqueuer.enqueue([ref], countdown=backoff)
        return
    _land(ref, result, claim)
    observability.component_landed(queue, component, result.status)


@_store_retry
def _land(ref: ComponentRef, result: ComponentResult, claim: pipeline.Claim) -> None:
    with transaction() as session:
        pipeline.land(session, ref, result, claim=claim)


@_store_retry
def _defer(ref: ComponentRef, owner: str, retry_in: float, reason: str, **options: Any) -> None:
    with transaction() as session:
        pipeline.defer(session, ref, owner, retry_in, reason, **options)


@task("scoring.metric_component", Queue.METRICS, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=20)
def metric_component(self, score_id: str, component: str) -> None:
    _run_component(self, score_id, component, Queue.METRICS)


@task("scoring.judge_component", Queue.JUDGE, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=20)
def judge_component(self, score_id: str, component: str) -> None:
    _run_component(self, score_id, component, Queue.JUDGE)


@task("scoring.reconcile", Queue.CONTROL, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5)
def reconcile(self) -> dict[str, int]:
    """Re-enqueue what lost messages left behind; also registers the suites' current criteria."""
    settings = get_settings()
    with transaction() as session:
        register_all_suites(session, settings.config_dir)
    with transaction() as session:
        report = pipeline.reconcile(session, requeue_after_seconds=settings.requeue_after_seconds)
    enqueuer.enqueue(report.refs)
    for batch_id in report.planning_batches:
        plan_batch.apply_async(args=(str(batch_id),))
    if report.refs:
        log.warning("reconciler re-enqueued %d component(s)", len(report.refs))
    return {"requeued": len(report.refs), "planning": len(report.planning_batches)}
