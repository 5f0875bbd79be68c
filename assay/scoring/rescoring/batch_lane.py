"""The judge's batch lane: judge requests sent through their provider's batch API (Anthropic's Message
Batches, OpenAI's Batch API: half price, results within 24 h) instead of one realtime call each. The
lane names no provider: it asks the provider registry's ``BatchAPI`` of the judge's provider to
encode, submit, poll and collect (``assay.scoring.judge.providers.base``). Services flush; the task
commits and calls the provider between transactions (``assay.workers.tasks.provider_batches``).

Life of a batch-lane judge component:
1. the planner creates it ``deferred`` with reason ``BATCH_LANE_WAITING`` and a ``run_after`` far
   beyond any realtime retry, so neither a stray message nor the reconciler sends it realtime;
2. ``prepare`` puts the requests of one (batch, component) into a ``provider_batches`` row (status
   ``creating``), up to the provider's own limits (Anthropic: 100,000 requests / 256 MB; OpenAI: 50,000
   / 200 MB) and the settings' caps, one model per provider batch, and points the components at it;
   committed *before* the provider is called;
3. the provider accepts it: ``started`` stores its id (``in_progress``). A worker restart loses nothing:
   the id is in Postgres and beat polls it (``due`` / ``polled``) with backoff;
4. once it has ended, ``apply_results`` reads its results (any order; ``custom_id`` = score id) through
   the realtime lane's validation: a valid verdict lands at the discounted price; an unusable answer,
   an errored, expired or canceled request goes to the realtime lane (its spend kept), and so does
   every request of a provider batch that failed as a whole (``finish``).

Never paid twice: a component lands once; a result for a component that landed or left the batch is
ignored; a ``creating`` row whose provider call never returned is released after ``CREATING_TIMEOUT``
(the one window where a crash can make a request be sent twice; see README).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError
from assay.scoring.judge.providers.base import BatchAPI, BatchResult, BatchState, Call
from assay.scoring.kinds import get_kind
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.budgets import charge_score, stop_for_budget
from assay.scoring.pipeline.components import JUDGE_QUEUE, ComponentRef
from assay.scoring.pipeline.landing import land
from assay.scoring.pipeline.planning import BATCH_LANE_WAITING
from assay.scoring.store.models import (
    LANDED_COMPONENT_STATUSES,
    Batch,
    Item,
    ProviderBatch,
    Score,
    ScoreComponent,
    utcnow,
)
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.loader import ModelCatalog
from assay.scoring.suites.providers import completion_limit

log = logging.getLogger(__name__)

CREATING_TIMEOUT = timedelta(minutes=10)
MAX_POLL_SECONDS = 600.0


@dataclass(frozen=True)
class Limits:
    max_requests: int
    max_bytes: int


@dataclass
class Prepared:
    """A provider batch ready to send (``requests``, to ``provider``), and what could not be sent
    (already landed). ``unavailable``: the judge's provider has no batch API in this process (no key):
    its requests wait."""

    row_id: uuid.UUID | None
    provider: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    failed: int = 0
    budget_stopped: int = 0
    unavailable: str | None = None


def waiting_groups(session: Session) -> list[tuple[uuid.UUID, str]]:
    """(batch, judge component) pairs with components waiting to be sent."""
    rows = session.execute(
        select(Score.batch_id, ScoreComponent.component)
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(
            ScoreComponent.status == "deferred",
            ScoreComponent.reason == BATCH_LANE_WAITING,
            ScoreComponent.provider_batch_id.is_(None),
            Score.status.in_(("pending", "in_progress")),
        )
        .group_by(Score.batch_id, ScoreComponent.component)
    ).all()
    return [(r.batch_id, r.component) for r in rows if r.batch_id is not None]


def prepare(
    session: Session,
    batch_id: uuid.UUID,
    component: str,
    catalog: ModelCatalog,
    apis: Mapping[str, BatchAPI],
    cap: Limits,
) -> Prepared:
    """Build the next provider batch of one (batch, component): its row, its requests (each encoded
    by the judge's provider), its components pointed at it. An item that cannot be judged fails now
    (as on the realtime lane); a budget that cannot pay for more stops the batch (``stop_for_budget``)
    instead of sending."""
    from assay.scoring.pipeline.scorer import render_judge_prompt

    # No lock on the batch row: landings need it, and one provider_batches task runs at a time.
    batch = session.get(Batch, batch_id)
    if batch is None:
        return Prepared(None)
    provider = _provider_of(session, batch.criteria_hash, component)
    api = apis.get(provider) if provider is not None else None
    if provider is not None and api is None:
        return Prepared(None, provider, unavailable=provider)
    limits = cap if api is None else Limits(
        min(cap.max_requests, api.limits.max_requests), min(cap.max_bytes, api.limits.max_bytes)
    )
    rows = session.execute(
        select(ScoreComponent.score_id, Score.criteria_hash, Item.payload)
        .join(Score, Score.id == ScoreComponent.score_id)
        .join(Item, Item.id == Score.item_id)
        .where(
            Score.batch_id == batch_id,
            ScoreComponent.component == component,
            ScoreComponent.status == "deferred",
            ScoreComponent.reason == BATCH_LANE_WAITING,
            ScoreComponent.provider_batch_id.is_(None),
        )
        .order_by(Score.position)
        .limit(limits.max_requests)
        .with_for_update(of=ScoreComponent, skip_locked=True)
    ).all()
    prepared = Prepared(None, provider)
    taken: list[uuid.UUID] = []
    size = 0
    model = ""
    # The most the batch may still spend, and an upper bound on each request's price (all of
    # max_tokens used): the provider is never handed more than the budget can pay for.
    remaining = None if batch.budget_usd is None else batch.budget_usd - batch.spent_usd
    committed = 0.0
    for row in rows:
        ref = ComponentRef(row.score_id, component, JUDGE_QUEUE)
        criteria = load_criteria(session, row.criteria_hash)
        kind = get_kind(criteria.kind)
        try:
            judge = criteria.judge_for(component)
            prompt, _ = render_judge_prompt(criteria, component, kind, kind.item_model.model_validate(row.payload), catalog)
        except AssayError as exc:
            land(session, ref, ComponentResult.failed(exc.message, dict(exc.details)))
            prepared.failed += 1
            continue
        if api is None or judge.provider != provider:
            break  # another provider's request (a criteria change mid-batch): its own provider batch
        price = catalog.price(judge.provider, judge.model)
        messages = [{"role": "user", "content": prompt.user}]
        call = Call(judge.model, prompt, messages, judge.max_tokens, 0.0, judge.verdict.model, judge.parameters)
        request = api.line(str(row.score_id), call)
        encoded = len(json.dumps(request, ensure_ascii=False).encode())
        if size + encoded > limits.max_bytes or (model and judge.model != model):
            break  # the rest go in the next provider batch (one model per provider batch)
        room = completion_limit(judge.max_tokens, judge.parameters)  # a reasoning model's reasoning included
        bound = price.batch_discount * ((encoded / 3) * price.input_per_mtok + room * price.output_per_mtok) / 1_000_000
        if remaining is not None and committed + bound > remaining:
            if not taken:
                # Not even one more request fits: the budget is spent as far as new calls go, so none
                # of the waiting requests will be sent; their scores stop like realtime ones would.
                for waiting in rows[rows.index(row):]:
                    stop_for_budget(session, ComponentRef(waiting.score_id, component, JUDGE_QUEUE), "batch-lane")
                    prepared.budget_stopped += 1
            break
        committed += bound
        model = judge.model
        size += encoded
        taken.append(row.score_id)
        prepared.requests.append(request)
    if not taken:
        return prepared
    provider_batch = ProviderBatch(
        id=uuid.uuid4(),
        batch_id=batch_id,
        component=component,
        provider=provider,
        model=model,
        status="creating",
        request_count=len(taken),
        request_bytes=size,
        polls=0,
        created_at=utcnow(),
    )
    session.add(provider_batch)
    session.flush()
    session.execute(
        update(ScoreComponent)
        .where(ScoreComponent.component == component, ScoreComponent.score_id.in_(taken))
        .values(provider_batch_id=provider_batch.id, reason=f"batch lane: in provider batch {provider_batch.id}")
    )
    prepared.row_id = provider_batch.id
    return prepared


def _provider_of(session: Session, criteria_hash: str, component: str) -> str | None:
    """The provider judging ``component`` under the batch's criteria; None if it cannot be resolved
    (then every item fails in ``prepare``, as it would on the realtime lane)."""
    try:
        return load_criteria(session, criteria_hash).judge_for(component).provider
    except AssayError:
        return None


def started(session: Session, row_id: uuid.UUID, provider_id: str, poll_seconds: float) -> None:
    session.execute(
        update(ProviderBatch)
        .where(ProviderBatch.id == row_id)
        .values(provider_id=provider_id, status="in_progress", next_poll_at=utcnow() + timedelta(seconds=poll_seconds))
    )
    session.execute(
        update(ScoreComponent)
        .where(ScoreComponent.provider_batch_id == row_id)
        .values(reason=f"batch lane: in provider batch {provider_id}")
    )


def release(session: Session, row_id: uuid.UUID, error: str) -> int:
    """The provider batch was never created (or never confirmed): its components wait to be sent again."""
    session.execute(
        update(ProviderBatch).where(ProviderBatch.id == row_id).values(status="failed", error=error[:2000])
    )
    return session.execute(
        update(ScoreComponent)
        .where(ScoreComponent.provider_batch_id == row_id, ScoreComponent.status == "deferred")
        .values(provider_batch_id=None, reason=BATCH_LANE_WAITING)
    ).rowcount or 0


def release_unconfirmed(session: Session, now: datetime | None = None) -> int:
    """``creating`` rows whose provider call never returned (the worker died in it)."""
    now = now or utcnow()
    stuck = session.scalars(
        select(ProviderBatch.id).where(ProviderBatch.status == "creating", ProviderBatch.created_at < now - CREATING_TIMEOUT)
    ).all()
    for row_id in stuck:
        log.warning("provider batch %s was never confirmed by the provider; its requests will be sent again", row_id)
        release(session, row_id, "the worker stopped before the provider confirmed the batch")
    return len(stuck)


def due(session: Session, now: datetime | None = None) -> list[tuple[uuid.UUID, str, str]]:
    """In-flight provider batches whose next poll is due: (row id, provider, provider's id)."""
    now = now or utcnow()
    rows = session.execute(
        select(ProviderBatch.id, ProviderBatch.provider, ProviderBatch.provider_id).where(
            ProviderBatch.status.in_(("in_progress", "ended")), ProviderBatch.next_poll_at <= now
        )
    ).all()
    return [(r.id, r.provider, r.provider_id) for r in rows]


def polled(session: Session, row_id: uuid.UUID, state: BatchState, poll_seconds: float) -> bool:
    """Record a poll; returns whether the provider batch has ended (its results can be read). Polls
    back off from ``poll_seconds``, doubling, to at most ten minutes."""
    now = utcnow()
    row = session.get(ProviderBatch, row_id, with_for_update=True)
    if row is None:
        return False
    row.polls += 1
    if state.ended:
        row.status = "ended"
        row.ended_at = row.ended_at or now
        row.request_counts = {**state.counts, "status": state.status}
        if state.error:
            row.error = state.error[:2000]
        return True
    row.next_poll_at = now + timedelta(seconds=min(MAX_POLL_SECONDS, poll_seconds * 2 ** min(row.polls - 1, 6)))
    return False


def apply_results(
    session: Session, row_id: uuid.UUID, results: Iterable[BatchResult], catalog: ModelCatalog
) -> list[ComponentRef]:
    """Land a chunk of a provider batch's results; returns components to send on the realtime lane."""
    from assay.scoring.judge.service import cost_usd, read_answer
    from assay.scoring.pipeline.scorer import judge_inputs_for, verdict_result

    row = session.get(ProviderBatch, row_id)
    if row is None:
        return []
    to_realtime: list[ComponentRef] = []
    for result in results:
        try:
            score_id = uuid.UUID(result.custom_id)
        except ValueError:
            log.warning("provider batch %s: unknown custom_id %r ignored", row.provider_id, result.custom_id)
            continue
        ref = ComponentRef(score_id, row.component, JUDGE_QUEUE)
        current = session.execute(
            select(ScoreComponent.status, ScoreComponent.provider_batch_id, Score.criteria_hash, Item.payload)
            .join(Score, Score.id == ScoreComponent.score_id)
            .join(Item, Item.id == Score.item_id)
            .where(ScoreComponent.score_id == score_id, ScoreComponent.component == row.component)
        ).first()
        if current is None or current.status in LANDED_COMPONENT_STATUSES or current.provider_batch_id != row_id:
            continue  # landed already (a re-read after a crash), or no longer this batch's
        answer = result.answer
        if answer is None:
            _to_realtime(session, ref, f"batch lane: {result.problem}")
            to_realtime.append(ref)
            continue
        criteria = load_criteria(session, current.criteria_hash)
        try:
            judge = criteria.judge_for(row.component)
        except AssayError as exc:  # criteria are immutable, so prepare() saw this too; never crash the poll
            land(session, ref, ComponentResult.failed(exc.message))
            continue
        price = catalog.price(judge.provider, judge.model)
        usage = answer.usage
        cost = cost_usd(usage, price) * price.batch_discount
        _text, verdict, problem = read_answer(answer, judge.verdict.model, judge.max_tokens, judge.parameters)
        if verdict is None:
            # The realtime lane asks again (with its one repair); this answer's price stays on the books.
            _to_realtime(session, ref, f"batch lane answer unusable ({problem}); sent to the realtime lane", usage, cost)
            to_realtime.append(ref)
            continue
        kind = get_kind(criteria.kind)
        try:
            _, notes = judge_inputs_for(criteria, row.component, kind, kind.item_model.model_validate(current.payload), catalog)
        except AssayError:
            notes = {}
        outcome = verdict_result(judge, verdict, notes, calls=1, usage=usage, cost_usd=cost)
        outcome.details.update(lane="batch", repaired=False)  # an unusable answer goes realtime, never repaired here
        land(session, ref, outcome)
    return to_realtime


def _to_realtime(
    session: Session, ref: ComponentRef, reason: str, usage: dict[str, int] | None = None, cost: float = 0.0
) -> None:
    values: dict[str, Any] = dict(
        status="pending", provider_batch_id=None, run_after=None, reason=reason, enqueued_at=utcnow()
    )
    if usage is not None:
        values.update(usage=usage, cost_usd=ScoreComponent.cost_usd + cost)
    session.execute(
        update(ScoreComponent)
        .where(ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component)
        .values(**values)
    )
    if cost:
        charge_score(session, ref.score_id, cost)


def finish(session: Session, row_id: uuid.UUID) -> list[ComponentRef]:
    """After every result was read: any component the results did not mention goes realtime."""
    row = session.get(ProviderBatch, row_id, with_for_update=True)
    if row is None:
        return []
    missing = session.execute(
        select(ScoreComponent.score_id).where(
            ScoreComponent.provider_batch_id == row_id, ScoreComponent.status.not_in(LANDED_COMPONENT_STATUSES)
        )
    ).scalars().all()
    refs = [ComponentRef(score_id, row.component, JUDGE_QUEUE) for score_id in missing]
    reason = (
        f"batch lane: the provider batch failed ({row.error})"
        if row.error
        else "batch lane: the provider returned no result for this request"
    )
    for ref in refs:
        _to_realtime(session, ref, reason)
    row.status = "processed"
    row.processed_at = utcnow()
    return refs

