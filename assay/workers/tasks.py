"""Tasks: thin adapters that take ids, call one service function each, and own the transaction.

Publishing happens only after the transaction that made the work visible has committed.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from datetime import datetime
from typing import Any

import kombu.exceptions
import redis
from celery.exceptions import Retry
from sqlalchemy import select
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from tenacity import before_sleep_log, retry, retry_if_exception_type, stop_after_delay, wait_exponential

from assay import observability

# Imported for their hooks: the review queue and calibration react to scores this worker lands.
from assay.scoring import features  # noqa: F401
from assay.scoring.judge.group import GroupGate
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.service import JudgeDeferred
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.claims import Claim, claim_many
from assay.scoring.pipeline.components import JUDGE_QUEUES, ComponentRef, is_online, judge_names
from assay.scoring.pipeline.planning import plan_chunk
from assay.scoring.pipeline.reconcile import RECONCILE_LIMIT, broker_holds_since, note_planner_waiting
from assay.scoring.pipeline.reconcile import reconcile as pipeline_reconcile
from assay.scoring.pipeline.scorer import JudgeRuntime, WorkUnit, judge_component
from assay.scoring.rescoring import rescore
from assay.scoring.store import retention
from assay.scoring.store.db import after_commits_gathered, transaction
from assay.scoring.store.models import Batch, utcnow
from assay.scoring.suites.criteria import register_all_suites
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings
from assay.workers import metric_groups
from assay.workers.app import Queue, app, task
from assay.workers.broker_identity import broker_identity
from assay.workers.landing import claimed_works, defer_component, land_results
from assay.workers.leases import lease_keeper
from assay.workers.runtime import CallSlots, batch_apis, call_slots, judge_runtime

log = logging.getLogger(__name__)

# Retry a publish through a broker outage (a Redis restart) rather than let the task die: what it
# publishes was committed to the store already, and would otherwise wait for the reconciler.
_broker_retry = retry(
    retry=retry_if_exception_type((kombu.exceptions.OperationalError, redis.RedisError, ConnectionError)),
    wait=wait_exponential(multiplier=0.5, max=5),
    stop=stop_after_delay(300),
    before_sleep=before_sleep_log(log, logging.WARNING),
    reraise=True,
)


def ref_args(refs: Sequence[ComponentRef]) -> list[list[str]]:
    """Components as a task's JSON argument: ``[[score_id, component], ...]``."""
    return [[str(ref.score_id), ref.component] for ref in refs]


class CeleryEnqueuer:
    """Publishes component tasks to their queues: a score's metric components together,
    ``metric_group_size`` scores per message (one claim, one item validation per score, landings
    together: :mod:`assay.workers.metric_groups`); judge components in groups of ``judge_group_size``,
    whose calls a task makes at once (one message, one claim and one landing transaction per group
    rather than per component). Each message's ``argsrepr`` (what Flower shows) names its group id,
    its size, its first components and, for judge components, the providers and models they call,
    read here from their scores' criteria whoever publishes them (planner, reconciler, deferral,
    hand-back, batch lane). A publish the broker refuses is retried until it is back (a message
    published twice is harmless: the claim makes it a no-op)."""

    def enqueue(self, refs: Sequence[ComponentRef], countdown: float | None = None) -> None:
        if refs:
            self._publish(refs, _judge_names(refs), countdown)

    @_broker_retry
    def _publish(self, refs: Sequence[ComponentRef], judges: dict[ComponentRef, str], countdown: float | None) -> None:
        settings = get_settings()
        by_queue: dict[str, list[ComponentRef]] = {}
        for ref in refs:
            by_queue.setdefault(ref.queue, []).append(ref)
        size = settings.judge_group_size
        with app.producer_or_acquire() as producer:
            for queue, queued in by_queue.items():
                if queue in JUDGE_QUEUES:
                    task_, groups = judge_components, [queued[start : start + size] for start in range(0, len(queued), size)]
                else:
                    task_, groups = metric_components, metric_groups.metric_groups(queued, settings.metric_group_size)
                # The queue travels with the task too: a deferral or retry sends its components back where they came from.
                kwargs = {"queue": queue} if is_online(queue) else None
                for group in groups:
                    shown = metric_groups.describe_group(metric_groups.new_group_id(), group, judges)
                    # The anonymous exchange routes by routing key: it names the queue (the task's own route names its batch queue).
                    task_.apply_async(
                        args=(ref_args(group),), kwargs=kwargs, queue=queue, exchange="", routing_key=queue,
                        countdown=countdown, producer=producer, argsrepr=shown,
                    )


def _judge_names(refs: Sequence[ComponentRef]) -> dict[ComponentRef, str]:
    """Judge refs' ``provider/model`` for what Flower shows; none when the store cannot say: a label
    is not worth holding back work whose rows are committed already."""
    try:
        with transaction() as session:
            return judge_names(session, refs)
    except SQLAlchemyError as exc:
        log.warning("judge task messages go out without their providers and models: %s", exc)
        return {}


enqueuer = CeleryEnqueuer()


def _declared_depth(conn: Any, queue: str) -> int:
    try:
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
    except Exception:  # a queue the broker has not seen yet holds nothing
        return 0


def queue_depths() -> dict[str, int] | None:
    """Messages waiting per queue, read from the broker (None when it cannot be read).

    On Redis, prefixed LLENs rather than kombu's passive queue_declare: with a broker key prefix
    that looks for the unprefixed key, finds nothing and reports every queue empty, which turned
    the planner's backpressure off. The embedded mode's in-memory broker has no prefix and no
    Redis: kombu's own count is right there."""
    if not get_settings().broker_url.startswith(("redis://", "rediss://", "unix://")):
        with app.connection_for_write() as conn:
            return {queue.value: _declared_depth(conn, queue.value) for queue in Queue}
    try:
        depths, _ = observability.queue_depths(get_settings())
    except redis.RedisError as exc:
        log.warning("cannot read the queue depths from the broker: %s", exc)
        return None
    return depths


def _broker_holds_since() -> datetime | None:
    """The broker's identity, recorded in the store: when it started holding the messages sent to it
    (None: it holds them all, or cannot be read; see :func:`broker_holds_since`)."""
    identity = broker_identity()
    if identity is None:
        return None
    with transaction() as session:
        return broker_holds_since(session, identity.name, identity.created_at)


@_broker_retry
def _plan_later(batch_id: str, countdown: float | None = None) -> None:
    plan_batch.apply_async(args=(batch_id,), countdown=countdown)


@task("scoring.plan_batch", Queue.CONTROL, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=None)
def plan_batch(self, batch_id: str, chunks_per_run: int = 20) -> None:
    """Enqueue a batch's components in chunks, pausing while the queues are deep (backpressure) or
    cannot be read; its publishes ride out a broker outage."""
    settings = get_settings()
    # Before stamping anything: what this run publishes to a new broker is then known to be there. The
    # store records the broker now, not at the reconciler's first pass: a broker that loses its
    # messages before that pass must not be taken for the first one, which holds everything.
    _broker_holds_since()
    for _ in range(chunks_per_run):
        depths = queue_depths()
        if depths is None or max(depths[Queue.METRICS], depths[Queue.JUDGE]) > settings.max_queue_depth:
            with transaction() as session:
                note_planner_waiting(session, uuid.UUID(batch_id))
            _plan_later(batch_id, countdown=2.0)
            return
        with transaction() as session:
            step = plan_chunk(session, uuid.UUID(batch_id), settings.plan_chunk_size)
        enqueuer.enqueue(step.refs)
        if step.finished:
            return
    # Keep each run short so a killed planner loses little; the batch row says where to resume.
    _plan_later(batch_id)


def _run_judge_group(task_self, pairs: list[list[str]], queue: str) -> None:  # type: ignore[no-untyped-def]
    """Claim the judge components in one statement, make their calls all at once on the process's
    judge loop, and land results as they come in: what finished while the previous landing ran lands
    together, in one transaction. A killed worker loses only the calls in flight and results not
    landed yet."""
    refs = list(dict.fromkeys(ComponentRef(uuid.UUID(score_id), component, queue) for score_id, component in pairs))
    owner = task_self.request.id or uuid.uuid4().hex
    slots = call_slots()
    deferred: dict[ComponentRef, tuple[JudgeDeferred, Claim]] = {}
    # Whether a finished score completed its batch is asked once the group is done, not per landing.
    with after_commits_gathered():
        # A group larger than the call slots runs in parts, each claimed once its calls can all start.
        for start in range(0, len(refs), slots.size):
            deferred |= _run_part(refs[start : start + slots.size], owner, slots)
    if deferred:
        for ref, (why, claim) in deferred.items():
            defer_component(ref, owner, why.retry_in, why.reason, usage=why.usage, cost_usd=why.cost_usd, claim=claim)
        # The deferred components go back to their queue as a new message with a countdown, not as
        # ``task.retry``: Celery reads ``max_retries=None`` there as the task's own limit, so an outage
        # outlasting that many deferrals failed the task. A deferral spends none of the components'
        # attempts and no retry count, so an outage of any length is waited out.
        reasons = [why for why, _ in deferred.values()]
        countdown = max(why.retry_in for why in reasons)
        enqueuer.enqueue(list(deferred), countdown=countdown)
        observability.task_retried(queue, "deferred")
        # Reported as RETRY with the reason (the worker's log, Flower), not as a failure.
        raise Retry(exc=reasons[0], when=countdown)


def _run_part(
    refs: list[ComponentRef], owner: str, slots: CallSlots
) -> dict[ComponentRef, tuple[JudgeDeferred, Claim]]:
    """Claim, judge and land ``refs``; returns the deferred ones (breaker open, rate limit) with
    their claims, for the caller to defer together."""
    lease = get_settings().judge_lease_seconds
    held = len(refs)
    slots.take(held)  # before the claim: nothing claimed waits for a call slot
    try:
        # One transaction claims and reads the work; it commits (the leases are visible) before the slow part.
        with transaction() as session:
            claims = claim_many(session, refs, owner, lease, check_budget=True)
            works = claimed_works(session, refs, claims, owner)
        busy = [(ref, claim.retry_in) for ref, claim in claims.items() if claim.state == "busy"]
        if busy:
            enqueuer.enqueue([ref for ref, _ in busy], countdown=max(retry_in for _, retry_in in busy))
        runtime = _group_runtime(works)
        slots.give(held - len(works))
        held = 0  # from here each of the works' calls gives its slot back when it ends
        deferred: dict[ComponentRef, tuple[JudgeDeferred, Claim]] = {}
        keeper = lease_keeper()
        # The process's heartbeat renews these leases while this task runs them, and no longer.
        with keeper.holding(owner, works, lease):
            for finished in _judged(works, runtime, slots):
                results = {ref: outcome for ref, outcome in finished if isinstance(outcome, ComponentResult)}
                if results:
                    land_results(results, claims)
                    for ref, result in results.items():
                        observability.component_landed(ref.queue, ref.component, result.status)
                for ref, outcome in finished:
                    if isinstance(outcome, JudgeDeferred):
                        deferred[ref] = (outcome, claims[ref])
                    elif isinstance(outcome, Exception):
                        # Infrastructure trouble (Redis down, ...): retry later, spending an attempt.
                        backoff = min(300.0, 5.0 * 2 ** min(claims[ref].attempts, 6))
                        reason = f"{type(outcome).__name__}: {outcome}"
                        defer_component(ref, owner, backoff, reason, spend_attempt=True, claim=claims[ref])
                        observability.task_retried(ref.queue, "error")
                        enqueuer.enqueue([ref], countdown=backoff)
        return deferred
    finally:
        if held:
            slots.give(held)


def _group_runtime(works: dict[ComponentRef, WorkUnit]) -> JudgeRuntime:
    """The judge runtime for one group's calls: they ask the breaker and the governor once per model
    (``GroupGate``), not one by one."""
    runtime = judge_runtime()
    if not runtime.providers or runtime.breaker is None or runtime.governor is None:
        return runtime
    calls: Counter[str] = Counter()  # by route: the breaker's and governor's key
    for ref, work in works.items():
        if not work.criteria.is_judge_call(ref.component):
            continue
        judge = work.criteria.judge_for(ref.component)
        provider = runtime.providers.get(judge.provider)
        if provider is not None:
            calls[provider.route(judge.model)] += 1
    # A task's group comes from one queue: online work asks with the share of the limit kept for it.
    gate = GroupGate(runtime.breaker, runtime.governor, calls, online=any(is_online(ref.queue) for ref in works))
    return dataclasses.replace(runtime, breaker=gate, governor=gate)


Outcome = ComponentResult | Exception


def _judged(
    works: dict[ComponentRef, WorkUnit], runtime: JudgeRuntime, slots: CallSlots
) -> Iterator[list[tuple[ComponentRef, Outcome]]]:
    """The components' outcomes, in lists of those that finished together: all sent at once on the
    judge loop as soon as they are claimed (the caller has taken a slot for each). The next list
    holds what finished while the caller landed the previous one."""
    loop = judge_loop()
    futures = {}
    for ref, work in works.items():
        future = loop.submit(_outcome(ref, work, runtime))
        future.add_done_callback(lambda _: slots.give())
        futures[future] = ref
    waiting = set(futures)
    while waiting:
        done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
        yield [(futures[future], future.result()) for future in done]


async def _outcome(ref: ComponentRef, work: WorkUnit, runtime: JudgeRuntime) -> Outcome:
    """The component's result, or the exception that stopped it (``JudgeDeferred`` included)."""
    try:
        return await judge_component(work, runtime)
    except JudgeDeferred as deferred:
        return deferred
    except Exception as exc:
        log.exception("component %s of score %s raised", ref.component, ref.score_id)
        return exc


@task("scoring.metric_components", Queue.METRICS, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=20)
def metric_components(self, refs: list[list[str]], queue: str = Queue.METRICS.value) -> None:
    """Metric components ``[[score_id, component], ...]``: a group of scores' (see :mod:`assay.workers.metric_groups`),
    from ``queue`` (``metrics``, or ``online-metrics`` for online scores)."""
    online_waiting = _online_metrics_waiting if queue == Queue.METRICS.value else None
    metric_groups.run_metric_group(self.request.id, refs, enqueuer.enqueue, queue, online_waiting)


def _online_metrics_waiting() -> bool:
    depths = queue_depths()
    return bool(depths and depths.get(Queue.ONLINE_METRICS.value))


@task("scoring.judge_components", Queue.JUDGE, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=20)
def judge_components(self, refs: list[list[str]], queue: str = Queue.JUDGE.value) -> None:
    """Judge components ``[[score_id, component], ...]``, their calls made at once; ``queue``: ``judge``, or
    ``online-judge`` for online scores (whose calls may use the share of the governor's limit kept for online work)."""
    _run_judge_group(self, refs, queue)


# Every pending component sent to a broker that lost it is re-sent in one pass; the planner keeps
# them near ASSAY_MAX_QUEUE_DEPTH, far below this.
RESEND_ALL_LIMIT = 1_000_000


@task("scoring.reconcile", Queue.CONTROL, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5)
def reconcile(self) -> dict[str, int]:
    """Re-enqueue what lost messages left behind, complete batches a dead worker left running; also
    registers the suites' current criteria."""
    settings = get_settings()
    lost_before = _broker_holds_since()
    with transaction() as session:
        register_all_suites(session, settings.config_dir)
    depths = queue_depths()
    # A pending component whose message still waits in a backlogged queue is not lost: re-sending it
    # would only lengthen the queue (and make more look lost). Lost ones are found once it drains.
    # What was sent to a broker before this one (restarted empty, or replaced) is lost wherever the
    # queues stand: it is re-sent and its planners restarted now, once (they are stamped).
    backlogged = set(Queue) if depths is None else {q for q, n in depths.items() if n > 0}
    with transaction() as session:
        report = pipeline_reconcile(
            session,
            requeue_after_seconds=settings.requeue_after_seconds,
            skip_pending_in=backlogged,
            lost_before=lost_before,
            limit=RESEND_ALL_LIMIT if lost_before is not None else RECONCILE_LIMIT,
        )
    enqueuer.enqueue(report.refs)
    for batch_id in report.planning_batches:
        _plan_later(str(batch_id))
    if report.refs:
        log.warning("reconciler re-enqueued %d component(s)", len(report.refs))
    if report.finished_batches:
        log.warning("reconciler completed %d batch(es) whose last landing did not", len(report.finished_batches))
    return {
        "requeued": len(report.refs),
        "planning": len(report.planning_batches),
        "finished": len(report.finished_batches),
    }


def build_rescore_run(batch_id: str, selection: rescore.Selection) -> int:
    """Fill a re-scoring batch wave by wave (a transaction each), then start its planner."""
    settings = get_settings()
    after: uuid.UUID | None = None
    while True:
        with transaction() as session:
            after = rescore.add_wave(session, uuid.UUID(batch_id), selection, after, settings.rescore_wave_size)
        if after is None:
            break
    with transaction() as session:
        plan = rescore.finish_building(session, uuid.UUID(batch_id))
        total = session.scalar(select(Batch.total_items).where(Batch.id == uuid.UUID(batch_id))) or 0
    if plan:
        _plan_later(batch_id)
    return total


@task("scoring.rescore_suite", Queue.CONTROL, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5)
def rescore_suite(self, batch_id: str, stale_only: bool = False, partial: bool = False) -> dict[str, int]:
    """A manual re-scoring run (POST /api/v1/rescore created its batch): add the scores, then plan."""
    total = build_rescore_run(batch_id, rescore.Selection(stale_only=stale_only, partial=partial))
    return {"scores": total}


@task("scoring.rescore_stale", Queue.CONTROL)
def rescore_stale(self) -> dict[str, Any]:
    """The nightly run: every enabled suite's stale and never-scored items (and partial ones, when a
    judge key is configured) re-scored under its current criteria, one batch per suite.

    Two beats may both fire it; a Postgres advisory lock held for the whole run lets one do the work,
    and the other returns at once. Even run twice in a row it is idempotent (see scoring.rescore)."""
    settings = get_settings()
    with rescore.run_lock("assay:rescore_stale") as acquired:
        if not acquired:
            log.info("rescore_stale: another run holds the lock; nothing to do here")
            return {"skipped": "another run holds the lock"}
        with transaction() as session:
            register_all_suites(session, settings.config_dir)
            records = [(r.name, *rescore.lane_and_budget(r)) for r in rescore.suites_to_rescore(session)]
        selection = rescore.Selection(partial=settings.anthropic_api_key is not None, nightly=True)
        runs: dict[str, Any] = {}
        for suite, lane, budget in records:
            with transaction() as session:
                batch = rescore.begin_run(
                    session, suite, selection, triggered_by="schedule", lane=lane, budget_usd=budget, scheduled=True
                )
                batch_id = str(batch.id)
            total = build_rescore_run(batch_id, selection)
            runs[suite] = {"batch_id": batch_id if total else None, "scores": total}
            log.info("rescore_stale: suite %s: %d score(s) to make (batch %s)", suite, total, batch_id if total else "-")
        return runs


@task("scoring.prune_history", Queue.CONTROL)
def prune_history(self) -> dict[str, Any]:
    """The nightly retention run: every suite's ``retention:`` policy applied (see scoring.store.retention).
    Two beats may both fire it; the advisory lock lets one do the work."""
    with rescore.run_lock("assay:prune_history") as acquired:
        if not acquired:
            return {"skipped": "another run holds the lock"}
        plans = retention.prune(chunk_size=get_settings().prune_chunk_size)
        expired = _drop_expired_spans()
    for plan in plans:
        if plan.batches:
            log.info(
                "prune_history: suite %s: %d batch(es) pruned, %d score(s) and %d component(s) removed",
                plan.suite, len(plan.batches), plan.removed_scores, plan.removed_components,
            )
    report: dict[str, Any] = {plan.suite: {"batches": len(plan.batches), "scores": plan.removed_scores} for plan in plans}
    return {**report, "spans": {"partitions": expired.partitions, "rows": expired.spans, "traces": expired.traces}}


def _drop_expired_spans():  # type: ignore[no-untyped-def]
    """Spans older than ASSAY_SPAN_RETENTION_DAYS, dropped with the nightly retention run."""
    from assay.scoring.online import spans

    with transaction() as session:
        expired = spans.drop_expired(session, utcnow().date(), get_settings().span_retention_days)
    if expired.partitions or expired.spans:
        log.info("prune_history: spans: dropped %s (%d row(s)), %d trace(s)", expired.partitions, expired.spans, expired.traces)
    return expired


@task("scoring.online_sample", Queue.CONTROL, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def online_sample(self, rounds: int = 10) -> dict[str, int]:
    """Beat's tick of online scoring: completed traces decided by the suites' online rules, their items'
    components published on the online queues after each commit (see scoring.online.sampler)."""
    from assay.scoring.online import sampler

    limit = get_settings().online_sample_limit
    totals: Counter[str] = Counter()
    for _ in range(rounds):
        with transaction() as session:
            report = sampler.sample(session, utcnow(), limit)
        enqueuer.enqueue(report.refs)
        totals.update(traces=report.traces, items=report.items, **report.decisions)
        if report.traces < limit:
            break  # caught up; a full round means more may be waiting
    return dict(totals)


@task("scoring.span_partitions", Queue.CONTROL)
def span_partitions(self) -> list[str]:
    """The span table's day partitions for today and the next ASSAY_SPAN_PARTITIONS_AHEAD days."""
    from assay.scoring.online import spans

    with transaction() as session:
        return spans.ensure_partitions(session, utcnow().date(), get_settings().span_partitions_ahead)


@task("scoring.provider_batches", Queue.CONTROL)
def provider_batches(self) -> dict[str, int]:
    """The judge's batch lane, on beat's clock: send waiting batch-lane requests as provider batches,
    poll the ones in flight, land the results of those that ended (see scoring.batch_lane), then delete
    what the provider stores of them. Each provider batch goes through its judge's provider's batch
    API (``BatchAPI``)."""
    from assay.scoring.rescoring import batch_lane

    apis = batch_apis()
    if not apis:
        return {"skipped": 1}  # no key: batch-lane components wait (the realtime lane would skip them)
    settings = get_settings()
    catalog = load_model_catalog(settings.config_dir)
    cap = batch_lane.Limits(settings.provider_batch_max_requests, settings.provider_batch_max_bytes)
    report = {"sent": 0, "requests": 0, "landed_batches": 0, "to_realtime": 0}
    with rescore.run_lock("assay:provider_batches") as acquired:
        if not acquired:
            return report  # the previous tick is still at it
        with transaction() as session:
            batch_lane.release_unconfirmed(session)
            groups = batch_lane.waiting_groups(session)
        for batch_id, component in groups:
            while True:
                with transaction() as session:
                    prepared = batch_lane.prepare(session, batch_id, component, catalog, apis, cap)
                if prepared.unavailable:
                    log.info("batch %s (%s): provider %s has no key here; its requests wait", batch_id, component, prepared.unavailable)
                if prepared.row_id is None or prepared.provider is None:
                    break
                try:
                    provider_id = apis[prepared.provider].submit(prepared.requests)
                except Exception as exc:  # the provider did not take it: the requests wait for the next tick
                    log.warning("provider batch for batch %s (%s) not created: %s", batch_id, component, exc)
                    with transaction() as session:
                        batch_lane.release(session, prepared.row_id, f"{type(exc).__name__}: {exc}")
                    break
                with transaction() as session:
                    batch_lane.started(session, prepared.row_id, provider_id, settings.provider_batch_interval_seconds)
                report["sent"] += 1
                report["requests"] += len(prepared.requests)
                log.info(
                    "batch %s: %d %s request(s) sent as %s provider batch %s",
                    batch_id, len(prepared.requests), component, prepared.provider, provider_id,
                )
        with transaction() as session:
            due = batch_lane.due(session)
        for row_id, provider, provider_id in due:
            api = apis.get(provider)
            if api is None:
                continue  # its key is gone from this process: polled again once it is back
            state = api.poll(provider_id)
            with transaction() as session:
                ended = batch_lane.polled(session, row_id, state, settings.provider_batch_interval_seconds)
            if not ended:
                continue
            chunk: list[Any] = []
            for result in api.collect(provider_id):
                chunk.append(result)
                if len(chunk) >= 500:
                    report["to_realtime"] += _apply_results(row_id, chunk, catalog)
                    chunk = []
            report["to_realtime"] += _apply_results(row_id, chunk, catalog)
            with transaction() as session:
                leftovers = batch_lane.finish(session, row_id)
            enqueuer.enqueue(leftovers)
            # Every result is committed: the provider's copy (OpenAI's files) is no longer needed.
            api.discard(provider_id)
            report["to_realtime"] += len(leftovers)
            report["landed_batches"] += 1
    return report


def _apply_results(row_id: uuid.UUID, results: list[Any], catalog: Any) -> int:
    from assay.scoring.rescoring import batch_lane

    with transaction() as session:
        to_realtime = batch_lane.apply_results(session, row_id, results, catalog)
    enqueuer.enqueue(to_realtime)
    return len(to_realtime)
