"""The scoring pipeline's state machine, on the store alone (no Celery here).

Every step is safe to run twice or never:
- components are *claimed* under a lease before any slow or paid work; a redelivered task finds the
  component landed (nothing to do) or leased (back off);
- a component *lands* once (``WHERE status NOT IN landed``); only the first landing bumps the score's
  completion count, and the landing that completes a score finalizes it in the same transaction;
  after that commit, a batch with no active score left is completed;
- the reconciler re-enqueues what a lost message left behind, leaves deferred work alone, and
  completes a batch whose completion check a crash cut off.
"""

from __future__ import annotations

import logging
import statistics
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy import (
    Float,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from assay import observability
from assay.scoring.errors import AssayError
from assay.scoring.kinds import get_kind
from assay.scoring.metrics.registry import PASS_BLOCKER, ComponentResult
from assay.scoring.store.db import after_commit, dialect_insert, transaction
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    FINISHED_SCORE_STATUSES,
    LANDED_COMPONENT_STATUSES,
    Batch,
    Item,
    Score,
    ScoreComponent,
    utcnow,
)
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.loader import Criteria
from assay.scoring.trust import review

log = logging.getLogger(__name__)

# Hot-path statements go through the tables (SQLAlchemy Core): the ORM's bulk-update machinery costs
# more CPU than the round trip itself, several times per component.
_components = ScoreComponent.__table__
_scores = Score.__table__
_c, _s = _components.c, _scores.c

METRICS_QUEUE = "metrics"
JUDGE_QUEUE = "judge"


@dataclass(frozen=True)
class ComponentRef:
    score_id: uuid.UUID
    component: str
    queue: str


class Enqueuer(Protocol):
    """Publishes component tasks; the workers layer implements it over Celery."""

    def enqueue(self, refs: Sequence[ComponentRef]) -> None: ...


def queue_for(criteria: Criteria, component: str) -> str:
    return JUDGE_QUEUE if criteria.components[component].is_judge else METRICS_QUEUE


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
        components_total=len(criteria.components),
        components_landed=0,
        cost_usd=0.0,
        triggered_by=triggered_by[:255],
        created_at=created_at,
    )


# --- planning ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanStep:
    refs: list[ComponentRef]
    finished: bool


def plan_chunk(session: Session, batch_id: uuid.UUID, chunk_size: int) -> PlanStep:
    """Create and mark enqueued the component rows of the next ``chunk_size`` scores of a batch.

    The caller commits, then publishes ``refs``. A crash between the two loses only messages, which
    the reconciler re-sends; ``planned_position`` makes a restarted planner resume where it stopped.
    """
    # Wait for the row rather than skip it: the check that completes a batch locks it for a moment,
    # and a planner that skipped it would stop with the batch unplanned. Two planners serialize here,
    # and the second resumes from the first's planned_position.
    batch = session.scalar(select(Batch).where(Batch.id == batch_id).with_for_update())
    if batch is None or batch.status != "planning":
        return PlanStep([], finished=True)  # gone, cancelled, stopped by its budget, or already planned
    batch.planner_seen_at = utcnow()
    rows = session.execute(
        select(Score.id, Score.position, Score.criteria_hash)
        .where(Score.batch_id == batch_id, Score.position > batch.planned_position)
        .order_by(Score.position)
        .limit(chunk_size)
    ).all()
    now = utcnow()
    if not rows:
        batch.status = "running"
        _complete_batch_if_done(session, batch)
        return PlanStep([], finished=True)
    # A re-score batch pays only for what changed (the marker its builders put in the summary). A
    # calibration batch carries deterministic components over but asks the judge every repeat anew.
    summary = batch.summary or {}
    calibration = "calibration" in summary
    refs = create_components(
        session,
        [(r.id, r.criteria_hash) for r in rows],
        now,
        judge_lane=batch.judge_lane,
        carry_over="rescore" in summary or calibration,
        carry_judges=not calibration,
    )
    batch.planned_position = rows[-1].position
    return PlanStep(refs, finished=False)


# The reason a batch-lane judge component waits with: the provider-batch submitter looks for it.
BATCH_LANE_WAITING = "batch lane: waiting to be sent in a provider batch"


def create_components(
    session: Session,
    scores: Sequence[tuple[uuid.UUID, str]],
    enqueued_at: datetime,
    *,
    judge_lane: str = "realtime",
    carry_over: bool = False,
    carry_judges: bool = True,
) -> list[ComponentRef]:
    """Component rows for scores (idempotent: existing rows are kept), returned as refs to publish.

    On the batch lane, judge components are not published: they wait, deferred far beyond any
    realtime retry, for the provider-batch submitter (``assay.scoring.rescoring.batch_lane``).

    ``carry_over`` (re-scores): a component whose fingerprint equals that of the same component in
    the item's latest finished score of the suite, where it landed ok (or skipped, for a metric),
    lands at once as a copy of that result at no cost and is never published (see
    :func:`carried_results`). A score all of whose components carry over is finalized here.
    ``carry_judges=False`` (calibration repeats): judge components never carry over, only metrics."""
    from assay.settings import get_settings

    refs: list[ComponentRef] = []
    rows: list[dict[str, Any]] = []
    carried_rows: list[dict[str, Any]] = []
    hold = timedelta(seconds=get_settings().provider_batch_hold_seconds)
    carried = carried_results(session, [score_id for score_id, _ in scores]) if carry_over else {}
    for score_id, criteria_hash in scores:
        criteria = load_criteria(session, criteria_hash)
        for name, spec in criteria.components.items():
            queue = queue_for(criteria, name)
            row = dict(
                score_id=score_id,
                component=name,
                queue=queue,
                status="pending",
                weight=spec.weight,
                attempts=0,
                cost_usd=0.0,
                enqueued_at=enqueued_at,
                run_after=None,  # every row has the same keys: one executemany
                reason=None,
            )
            previous = carried.get((score_id, name)) if carry_judges or queue != JUDGE_QUEUE else None
            if previous is not None:
                carried_rows.append(
                    {
                        **row,
                        "status": previous.status,
                        "score": previous.score,
                        "weighted_score": previous.score * spec.weight if previous.score is not None else None,
                        "details": previous.details,
                        "reason": previous.reason,
                        "raw_output": previous.raw_output,
                        "carried_over_from": previous.origin,
                        "landed_at": enqueued_at,
                    }
                )
                continue
            if queue == JUDGE_QUEUE and judge_lane == "batch":
                row.update(status="deferred", run_after=enqueued_at + hold, reason=BATCH_LANE_WAITING)
            else:
                refs.append(ComponentRef(score_id, name, queue))
            rows.append(row)
    if rows:
        session.execute(dialect_insert(session)(ScoreComponent).on_conflict_do_nothing(), rows)
    if carried_rows:
        _land_carried(session, carried_rows)
    return refs


# --- carrying a landed result over to a re-score -------------------------------------------------------

# A skipped judge is not carried: its skip (no API key, say) says nothing about the item, and a
# re-score with a key must run it. A metric's skip is as deterministic as its score.
_CARRYABLE = or_(_c.status == "ok", and_(_c.status == "skipped", _c.queue == METRICS_QUEUE))


@dataclass(frozen=True)
class CarriedResult:
    """A landed component of an earlier score, to copy; ``origin``: the score whose run computed it."""

    status: str
    score: float | None
    details: dict[str, Any] | None
    reason: str | None
    raw_output: str | None
    origin: uuid.UUID


def latest_finished_score(item_id: Any, suite_name: Any) -> Any:
    """The id of an item's latest finished machine score of a suite (calibration repeats are left
    out), as a correlated scalar subquery over the enclosing query's ``item_id`` and ``suite_name``
    expressions (what a re-score carries over from)."""
    prev = _scores.alias("assay_prev")
    return (
        select(prev.c.id)
        .where(
            prev.c.item_id == item_id,
            prev.c.suite_name == suite_name,
            prev.c.status.in_(FINISHED_SCORE_STATUSES),
            machine_scores(prev),
        )
        .order_by(prev.c.created_at.desc(), prev.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def carried_results(session: Session, score_ids: Sequence[uuid.UUID]) -> dict[tuple[uuid.UUID, str], CarriedResult]:
    """For new scores: each component whose result can be carried over from its item's latest finished
    score of the suite, keyed by (new score id, component). A component carries when it landed ok (or a
    metric skipped) there and its fingerprint (:meth:`Criteria.component_fingerprint`: its own spec,
    the kind and the field mapping) is the same under both criteria; the item is the same row, so the
    same payload. Failed and cancelled components are computed again."""
    if not score_ids:
        return {}
    new = _scores.alias("assay_new")
    pairs = session.execute(
        select(new.c.id, new.c.criteria_hash, latest_finished_score(new.c.item_id, new.c.suite_name).label("prev"))
        .where(new.c.id.in_(list(score_ids)))
    ).all()
    # Several new scores may share one previous score (a calibration's repeats of one item).
    wanted: dict[uuid.UUID, list[Any]] = {}
    for pair in pairs:
        if pair.prev is not None:
            wanted.setdefault(pair.prev, []).append(pair)
    if not wanted:
        return {}
    landed = session.execute(
        select(
            _c.score_id, _c.component, _c.status, _c.score, _c.details, _c.reason, _c.raw_output,
            _c.carried_over_from, _s.criteria_hash,
        )
        .join(_scores, _s.id == _c.score_id)
        .where(_c.score_id.in_(list(wanted)), _CARRYABLE)
    ).all()
    fingerprints: dict[tuple[str, str], str | None] = {}

    def fingerprint(criteria_hash: str, component: str) -> str | None:
        key = (criteria_hash, component)
        if key not in fingerprints:
            try:
                criteria = load_criteria(session, criteria_hash)
                fingerprints[key] = criteria.component_fingerprint(component) if component in criteria.components else None
            except (AssayError, ValidationError):
                # Criteria this code can no longer read: nothing of it is carried.
                fingerprints[key] = None
        return fingerprints[key]

    out: dict[tuple[uuid.UUID, str], CarriedResult] = {}
    for comp in landed:
        for new_score in wanted[comp.score_id]:
            mine = fingerprint(new_score.criteria_hash, comp.component)
            if mine is not None and mine == fingerprint(comp.criteria_hash, comp.component):
                out[(new_score.id, comp.component)] = CarriedResult(
                    comp.status, comp.score, comp.details, comp.reason, comp.raw_output,
                    comp.carried_over_from or comp.score_id,
                )
    return out


def _land_carried(session: Session, carried_rows: list[dict[str, Any]]) -> None:
    """Insert carried-over components as landed, count them on their scores, and finalize a score
    they complete. Only rows inserted now are counted: planning a chunk twice counts nothing twice."""
    inserted = session.execute(
        dialect_insert(session)(ScoreComponent).on_conflict_do_nothing().returning(_c.score_id), carried_rows
    ).scalars().all()
    for score_id, landed in Counter(inserted).items():
        score = session.execute(_BUMP_CARRIED, {"b_score_id": score_id, "b_landed": landed}).one()
        if score.components_landed == score.components_total:
            finalize_score(session, score_id, score=score)


# --- claiming -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """``claimed``: do the work. ``landed``/``missing``: nothing to do. ``busy``: retry in ``retry_in`` s."""

    state: str
    attempts: int = 0
    retry_in: float = 0.0
    # What the component had already spent (a deferred attempt's calls), carried to its landing.
    prior_usage: dict[str, int] | None = None
    prior_cost: float = 0.0
    # Asked for with ``check_budget``: the score's batch has spent its budget (no call may be made),
    # and whether it has a budget at all (a landing need not count the spend on the batch row if not).
    budget_spent: bool = False
    budgeted: bool = True


def claim(
    session: Session, ref: ComponentRef, owner: str, lease_seconds: float, *, check_budget: bool = False
) -> Claim:
    """Lease one component to ``owner`` (see ``claim_many``)."""
    return claim_many(session, [ref], owner, lease_seconds, check_budget=check_budget)[ref]


def claim_many(
    session: Session, refs: Sequence[ComponentRef], owner: str, lease_seconds: float, *, check_budget: bool = False
) -> dict[ComponentRef, Claim]:
    """Lease the components to ``owner``, in one statement however many there are. ``check_budget``
    (judge components) also reads, in the same statement, whether each score's batch has spent its
    budget, and whether it has one."""
    now = utcnow()
    c = _components.c
    claimable = or_(
        c.status == "pending",
        and_(c.status == "deferred", c.run_after <= now),
        and_(c.status == "in_progress", c.lease_expires_at < now),
        # The same message redelivered (acks_late) means its previous run died: take the lease back.
        and_(c.status == "in_progress", c.lease_owner == owner),
    )
    by_key = {(ref.score_id, ref.component): ref for ref in refs}
    these = tuple_(c.score_id, c.component).in_(list(by_key))
    claimed = session.execute(
        update(_components)
        .where(these, claimable)
        .values(
            status="in_progress",
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            attempts=c.attempts + 1,
            run_after=None,
        )
        .returning(
            c.score_id, c.component, c.attempts, c.usage, c.cost_usd,
            _budget_state(_SPENT, check_budget).label("budget_spent"),
            _budget_state(_BUDGETED, check_budget).label("budgeted"),
        )
    ).all()
    claims: dict[ComponentRef, Claim] = {
        by_key[(row.score_id, row.component)]: Claim(
            "claimed",
            attempts=row.attempts,
            prior_usage=row.usage,
            prior_cost=row.cost_usd or 0.0,
            budget_spent=bool(row.budget_spent),
            budgeted=bool(row.budgeted) or not check_budget,
        )
        for row in claimed
    }
    if claims:
        session.execute(
            update(_scores)
            .where(_scores.c.id.in_({ref.score_id for ref in claims}), _scores.c.status == "pending")
            .values(status="in_progress", started_at=now)
        )
    others = [key for key, ref in by_key.items() if ref not in claims]
    if others:
        rows = session.execute(
            select(c.score_id, c.component, c.status, c.lease_expires_at, c.run_after).where(
                tuple_(c.score_id, c.component).in_(others)
            )
        ).all()
        for row in rows:
            ref = by_key[(row.score_id, row.component)]
            if row.status in LANDED_COMPONENT_STATUSES:
                claims[ref] = Claim("landed")
            else:
                until = row.lease_expires_at if row.status == "in_progress" else row.run_after
                claims[ref] = Claim("busy", retry_in=max(1.0, _seconds_until(until, now)))
    return {ref: claims.get(ref, Claim("missing")) for ref in refs}


def renew_leases(
    session: Session, owners: Collection[str], *, judge_seconds: float, metrics_seconds: float
) -> set[tuple[uuid.UUID, str, str]]:
    """A live worker's heartbeat: every component still in progress under one of ``owners`` gets a
    fresh lease of its queue's length, in one UPDATE. Returns the (score_id, component, owner) renewed:
    a component of theirs not among them is no longer theirs (landed, deferred, cancelled, or taken
    over by another worker after its lease ran out)."""
    if not owners:
        return set()
    now = utcnow()
    c = _components.c
    until = case(
        (c.queue == JUDGE_QUEUE, bindparam("judge_until", now + timedelta(seconds=judge_seconds), c.lease_expires_at.type)),
        else_=bindparam("metrics_until", now + timedelta(seconds=metrics_seconds), c.lease_expires_at.type),
    )
    renewed = session.execute(
        update(_components)
        .where(c.status == "in_progress", c.lease_owner.in_(list(owners)))
        .values(lease_expires_at=until)
        .returning(c.score_id, c.component, c.lease_owner)
    ).all()
    return {(row.score_id, row.component, row.lease_owner) for row in renewed}


def _seconds_until(moment: datetime | None, now: datetime) -> float:
    if moment is None:
        return 0.0
    if moment.tzinfo is None:  # SQLite hands datetimes back naive (they are stored as UTC)
        moment = moment.replace(tzinfo=now.tzinfo)
    return (moment - now).total_seconds()


def _spend(
    session: Session, ref: ComponentRef, usage: dict[str, int] | None, cost: float | None, prior: Claim | None
) -> dict[str, Any]:
    """The component's spend so far plus this run's: calls paid before a deferral are never lost.

    The claim carries what was spent before (no other run touches a leased component); without one
    it is read from the row."""
    if prior is not None:
        prior_usage, prior_cost = prior.prior_usage, prior.prior_cost
    else:
        row = session.execute(
            select(ScoreComponent.usage, ScoreComponent.cost_usd).where(
                ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component
            )
        ).first()
        prior_usage, prior_cost = (row.usage, row.cost_usd) if row is not None else (None, 0.0)
    merged = _sum_usage([prior_usage, usage])
    return {"usage": merged or None, "cost_usd": (prior_cost or 0.0) + (cost or 0.0)}


def defer(
    session: Session,
    ref: ComponentRef,
    owner: str,
    retry_in: float,
    reason: str,
    *,
    spend_attempt: bool = False,
    usage: dict[str, int] | None = None,
    cost_usd: float = 0.0,
    claim: Claim | None = None,
) -> None:
    """Give the component back until ``retry_in`` from now.

    A deferral on purpose (breaker open, rate limit) does not spend an attempt; an unexpected error
    does, so a component that keeps crashing ends as failed once its attempts are used up.
    """
    spend = _spend(session, ref, usage, cost_usd, claim)
    session.execute(
        update(ScoreComponent)
        .where(
            ScoreComponent.score_id == ref.score_id,
            ScoreComponent.component == ref.component,
            ScoreComponent.lease_owner == owner,
            ScoreComponent.status == "in_progress",
        )
        .values(
            status="deferred",
            run_after=utcnow() + timedelta(seconds=retry_in),
            lease_owner=None,
            lease_expires_at=None,
            attempts=ScoreComponent.attempts - (0 if spend_attempt else 1),
            reason=reason,
            **spend,
        )
    )
    charge_score(session, ref.score_id, cost_usd)


def charge_score(session: Session, score_id: uuid.UUID, cost_usd: float | None) -> None:
    """Add a spend outside a landing (a deferred or redirected attempt) to the score's batch."""
    if cost_usd:
        _charge(session, session.scalar(select(Score.batch_id).where(Score.id == score_id)), cost_usd)


def _charge(session: Session, batch_id: uuid.UUID | None, cost_usd: float | None) -> None:
    """What a batch with a budget has spent, kept on its row (same transaction as the spend).

    Only for budgeted batches: the update locks the batch row until commit, and every concurrent
    landing of the batch would queue behind it (a batch's total cost is in its summary anyway)."""
    if batch_id is not None and cost_usd:
        session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.budget_usd.is_not(None))
            .values(spent_usd=Batch.spent_usd + cost_usd)
        )


# --- landing and finalizing -----------------------------------------------------------------------------


# The landing path's statements, built once: building and cache-keying a statement costs more CPU
# than running it (~0.5 ms for the component update), several times per component. Without their
# RETURNING clause they run as one executemany for a set of landings (pipelined by psycopg).
# Written out, not NOT IN (...): an IN list is an expanding parameter, which executemany refuses.
_NOT_LANDED = and_(*(_c.status != literal_column(f"'{status}'") for status in LANDED_COMPONENT_STATUSES))
_LAND_COMPONENTS = (
    update(_components)
    .where(_c.score_id == bindparam("b_score_id"), _c.component == bindparam("b_component"), _NOT_LANDED)
    .values(
        status=bindparam("b_status"),
        score=bindparam("b_score", type_=Float),
        weighted_score=bindparam("b_score", type_=Float) * _c.weight,  # NULL when there is no score
        details=bindparam("b_details"),
        reason=bindparam("b_reason"),
        landed_at=bindparam("b_now"),
        lease_owner=None,
        lease_expires_at=None,
        run_after=None,
        usage=bindparam("b_usage"),
        cost_usd=bindparam("b_cost_usd"),
        raw_output=bindparam("b_raw_output", type_=Text),  # the score keeps the last one too, for older readers
        carried_over_from=None,  # computed by this run (a resumed component may have been carried before)
    )
)
_LAND_COMPONENT = _LAND_COMPONENTS.returning(_c.weight)
# Of a set of landings, those not landed already; their rows stay locked until the commit.
_LANDABLE = (
    select(_c.score_id, _c.component)
    .where(
        tuple_(_c.score_id, _c.component).in_(bindparam("b_keys", expanding=True)),
        _c.status.not_in(LANDED_COMPONENT_STATUSES),
    )
    .with_for_update()
)
# A score's landings in one transaction count on it in one write (not one per component): each row
# version of a score is a dead one left behind (autovacuum may be off). The landing that completes a
# score writes the count with its final row instead (``_FINALIZE``).
_COUNT_LANDINGS = (
    update(_scores)
    .where(_s.id == bindparam("b_score_id"))
    .values(
        components_landed=_s.components_landed + bindparam("b_landed", type_=Integer),
        raw_judge_output=func.coalesce(bindparam("b_raw_output", type_=Text), _s.raw_judge_output),
        error_kind=func.coalesce(bindparam("b_error_kind", type_=String), _s.error_kind),
    )
)
# What finalizing needs of a score: the landing that completes it has it at hand.
_COUNTED = (
    _s.components_landed, _s.components_total, _s.batch_id,
    _s.status, _s.criteria_hash, _s.error_kind, _s.suite_name, _s.item_id, _s.calibration_run_id,
)
# The landing's scores, locked before it counts on them: whether it completes a score decides which
# write counts it (concurrent landings of the same score's other components wait here). Locked in id
# order, so that two landings sharing scores cannot lock them crosswise.
_COUNTING_SCORES = (
    select(_s.id, *_COUNTED)
    .where(_s.id.in_(bindparam("b_score_ids", expanding=True)))
    .order_by(_s.id)
    .with_for_update()
)
# A re-score's carried-over components count on their score all at once (see ``create_components``).
_BUMP_CARRIED = (
    update(_scores)
    .where(_s.id == bindparam("b_score_id"))
    .values(components_landed=_s.components_landed + bindparam("b_landed", type_=Integer))
    .returning(*_COUNTED)
)


@dataclass(frozen=True)
class Landing:
    """A component's result to record; ``claim``: the run's, carrying what was spent before it."""

    ref: ComponentRef
    result: ComponentResult
    claim: Claim | None = None


def land(
    session: Session, ref: ComponentRef, result: ComponentResult, *, timed_out: bool = False, claim: Claim | None = None
) -> bool:
    """Record a component's result once. Returns False when it had landed already (a duplicate run)."""
    return bool(land_many(session, [Landing(ref, result, claim)], timed_out=timed_out))


def land_many(
    session: Session, landings: Sequence[Landing], *, timed_out: bool = False, items: dict[uuid.UUID, Any] | None = None
) -> set[ComponentRef]:
    """Record each component's result once; returns the components that landed now (not those a
    duplicate run had landed already). The scores whose last component lands are finalized together
    (``items``: their items, already validated, if at hand).

    One landing's component update has RETURNING (whether it landed); several take a locking read of
    which can land and the component updates as one executemany. Then a locking read of their scores,
    and one write per score (one executemany): its count, or, for a score this completes, its final
    row with the count in it (each version of a score row is a dead one left behind)."""
    now = utcnow()
    by_ref = {landing.ref: landing for landing in landings}
    rows: dict[ComponentRef, dict[str, Any]] = {}
    for ref, landing in by_ref.items():
        spend = _spend(session, ref, landing.result.usage, landing.result.cost_usd, landing.claim)
        rows[ref] = {
            "b_score_id": ref.score_id,
            "b_component": ref.component,
            "b_status": landing.result.status,
            "b_score": landing.result.score,
            "b_details": landing.result.details or None,
            "b_reason": landing.result.reason,
            "b_now": now,
            "b_usage": spend["usage"],
            "b_cost_usd": spend["cost_usd"],
            "b_raw_output": landing.result.raw_output,
            "b_error_kind": "timed_out" if timed_out else None,
        }
    if len(rows) == 1:
        ((ref, row),) = rows.items()
        if session.scalar(_LAND_COMPONENT, row) is None:
            return set()
        landed = [ref]
    else:
        keys = [(ref.score_id, ref.component) for ref in rows]
        landable = {(found.score_id, found.component) for found in session.execute(_LANDABLE, {"b_keys": keys})}
        landed = [ref for ref in rows if (ref.score_id, ref.component) in landable]
        if not landed:
            return set()
        session.execute(_LAND_COMPONENTS, [rows[ref] for ref in landed])
    counts: dict[uuid.UUID, dict[str, Any]] = {}
    for ref in landed:
        count = counts.setdefault(
            ref.score_id,
            {"b_score_id": ref.score_id, "b_landed": 0, "b_raw_output": None, "b_error_kind": rows[ref]["b_error_kind"]},
        )
        count["b_landed"] += 1
        if rows[ref]["b_raw_output"] is not None:  # as one write per landing would leave it: the last one given
            count["b_raw_output"] = rows[ref]["b_raw_output"]
    counted = {score.id: score for score in session.execute(_COUNTING_SCORES, {"b_score_ids": list(counts)})}
    for ref in landed:
        claim = by_ref[ref].claim
        if claim is None or claim.budgeted:
            _charge(session, counted[ref.score_id].batch_id, by_ref[ref].result.cost_usd)
    complete = {
        score_id: score for score_id, score in counted.items()
        if score.components_landed + counts[score_id]["b_landed"] == score.components_total
    }
    finalized = finalize_scores(session, complete, items=items, counts=counts) if complete else set()
    counting = [count for score_id, count in counts.items() if score_id not in finalized]
    if counting:
        session.execute(_COUNT_LANDINGS, counting)
    return set(landed)


@dataclass(frozen=True)
class FinalizedScore:
    """A score as its finalizing landing left it (what a kind's ``on_finalized`` hook reads)."""

    id: uuid.UUID
    status: str
    total: float | None
    passed: bool
    partial: bool
    error_kind: str | None
    error_message: str | None


_FINALIZING_SCORE = select(
    _s.status, _s.criteria_hash, _s.error_kind, _s.batch_id, _s.suite_name, _s.item_id, _s.calibration_run_id
).where(
    _s.id == bindparam("b_score_id")
)
_FINALIZE = (
    update(_scores)
    .where(_s.id == bindparam("b_score_id"))
    .values(
        status=bindparam("b_status"),
        total=bindparam("b_total"),
        passed=bindparam("b_passed"),
        partial=bindparam("b_partial"),
        error_kind=bindparam("b_error_kind"),
        error_message=bindparam("b_error_message"),
        usage=bindparam("b_usage"),
        cost_usd=bindparam("b_cost_usd"),
        completed_at=bindparam("b_now"),
        # The completing landing's count (``_COUNT_LANDINGS``), in the same row version.
        components_landed=_s.components_landed + bindparam("b_landed", type_=Integer),
        raw_judge_output=func.coalesce(bindparam("b_raw_output", type_=Text), _s.raw_judge_output),
    )
)


def component_pass_blockers(components: Iterable[Any]) -> list[str]:
    """The pass blockers the components named (``details["pass_blocker"]``, see
    :data:`~assay.scoring.metrics.registry.PASS_BLOCKER`), as ``component: reason``; read from every
    component that was not failed (a failed one fails the score anyway). ``components``: rows or
    objects with ``component``, ``status`` and ``details``."""
    return [
        f"{comp.component}: {comp.details[PASS_BLOCKER]}"
        for comp in components
        if comp.status != "failed" and comp.details and comp.details.get(PASS_BLOCKER)
    ]


def min_score_blockers(criteria: Criteria, components: Iterable[Any]) -> list[str]:
    """The pass blockers of components with a ``min_score``: an ok score below it, or no score at all
    (skipped: what the suite requires of the item was not established, invariant 7)."""
    blockers = []
    for comp in components:
        spec = criteria.components.get(comp.component)
        floor = spec.min_score if spec is not None else None
        if floor is None or comp.status == "failed":
            continue
        if comp.status == "ok" and comp.score is not None and comp.score < floor - 1e-12:
            blockers.append(f"{comp.component}: score {comp.score:.2f} is below its min_score {floor:.2f}")
        elif comp.status == "skipped":
            blockers.append(f"{comp.component}: skipped ({comp.reason}), so its min_score {floor:.2f} was not checked")
    return blockers


def finalize_score(session: Session, score_id: uuid.UUID, *, score: Any = None) -> None:
    """Total, pass and status of a score whose components have all landed (see ``finalize_scores``).
    ``score``: its row as the landing read it, if at hand (status, criteria_hash, error_kind,
    batch_id, suite_name, item_id, calibration_run_id)."""
    row = score if score is not None else session.execute(_FINALIZING_SCORE, {"b_score_id": score_id}).first()
    if row is not None:
        finalize_scores(session, {score_id: row})


_FINALIZING_COMPONENTS_OF = select(
    _c.score_id, _c.component, _c.status, _c.score, _c.weight, _c.usage, _c.cost_usd, _c.reason, _c.details
).where(_c.score_id.in_(bindparam("b_score_ids", expanding=True)))
_ITEM_PAYLOADS = select(Item.id, Item.payload).where(Item.id.in_(bindparam("b_item_ids", expanding=True)))


def finalize_scores(
    session: Session,
    scores: dict[uuid.UUID, Any],
    *,
    items: dict[uuid.UUID, Any] | None = None,
    counts: dict[uuid.UUID, dict[str, Any]] | None = None,
) -> set[uuid.UUID]:
    """Total, pass and status of scores whose components have all landed, in one pass (Core
    statements: this runs on the landing hot path): one read of their components, one executemany of
    their final rows. Returns the scores finalized (those still active). ``scores``: each score's row
    as the landing read it (status, criteria_hash, error_kind, batch_id, suite_name, item_id,
    calibration_run_id). ``items``: scores' items already validated (a metric group's); otherwise the
    item is read only for a kind with pass blockers (a session's payload can be megabytes).
    ``counts``: the completing landing's counts not yet written (``_COUNT_LANDINGS`` parameters, by
    score), written with the final rows."""
    active = {score_id: row for score_id, row in scores.items() if row.status in ACTIVE_SCORE_STATUSES}
    if not active:
        return set()
    counts = counts or {}
    items = items or {}
    comps_of: dict[uuid.UUID, list[Any]] = {score_id: [] for score_id in active}
    for comp in session.execute(_FINALIZING_COMPONENTS_OF, {"b_score_ids": list(active)}):
        comps_of[comp.score_id].append(comp)
    kinds = {score_id: load_criteria(session, row.criteria_hash) for score_id, row in active.items()}
    wanted = {
        row.item_id for score_id, row in active.items()
        if get_kind(kinds[score_id].kind).pass_blockers is not None and score_id not in items
    }
    payloads = dict(session.execute(_ITEM_PAYLOADS, {"b_item_ids": list(wanted)}).all()) if wanted else {}
    now = utcnow()
    finals = []
    for score_id, row in active.items():
        criteria = kinds[score_id]
        kind = get_kind(criteria.kind)
        comps = comps_of[score_id]
        failed = [comp for comp in comps if comp.status == "failed"]
        ok = [comp for comp in comps if comp.status == "ok"]
        total: float | None = None
        passed = False
        partial = False
        error_kind: str | None
        count = counts.get(score_id, {})
        landing_error_kind = count.get("b_error_kind") or row.error_kind
        if failed:
            # A failed component never renormalises: the score fails, with the reason, and can be retried.
            status = "timed_out" if landing_error_kind == "timed_out" else "failed"
            error_kind = landing_error_kind or "component_failed"
            error_message = "; ".join(f"{comp.component}: {comp.reason}" for comp in failed)
        elif not ok:
            status, error_kind = "failed", "nothing_scored"
            error_message = "every component was skipped: " + "; ".join(f"{comp.component}: {comp.reason}" for comp in comps)
        else:
            weight = sum(comp.weight for comp in ok)
            total = min(1.0, max(0.0, sum((comp.score or 0.0) * comp.weight for comp in ok) / weight))
            partial = len(ok) < len(comps)
            item_blockers: list[str] = []
            if kind.pass_blockers is not None:
                item = items.get(score_id)
                if item is None and payloads.get(row.item_id) is not None:
                    item = kind.item_model.model_validate(payloads[row.item_id])
                item_blockers = kind.pass_blockers(item) if item is not None else []
            blockers = list(
                dict.fromkeys([*item_blockers, *component_pass_blockers(comps), *min_score_blockers(criteria, comps)])
            )
            passed = total >= criteria.threshold - 1e-12 and not blockers
            status, error_kind = "completed", None
            error_message = "; ".join(blockers) or None
        cost = sum(comp.cost_usd or 0.0 for comp in comps)
        finals.append(
            {
                "b_score_id": score_id,
                "b_status": status,
                "b_total": total,
                "b_passed": passed,
                "b_partial": partial,
                "b_error_kind": error_kind,
                "b_error_message": error_message,
                "b_usage": _sum_usage(comp.usage for comp in comps) or None,
                "b_cost_usd": cost,
                "b_now": now,
                "b_landed": count.get("b_landed", 0),
                "b_raw_output": count.get("b_raw_output"),
            }
        )
    session.execute(_FINALIZE, finals)
    review.after_finalize(
        session,
        [
            review.Finalized(
                score_id, row.suite_name, row.item_id, row.criteria_hash, kinds[score_id].threshold,
                final["b_status"], final["b_total"], comps_of[score_id],
            )
            for final, (score_id, row) in zip(finals, active.items(), strict=True)
        ],
    )
    for final, (score_id, row) in zip(finals, active.items(), strict=True):
        criteria = kinds[score_id]
        kind = get_kind(criteria.kind)
        comps = comps_of[score_id]
        status, total, passed = final["b_status"], final["b_total"], final["b_passed"]
        # A calibration repeat is no machine verdict: no kind rows (feedback analytics) and no outcome
        # counted in Prometheus (its cost is).
        calibration = getattr(row, "calibration_run_id", None) is not None
        if kind.on_finalized is not None and not calibration:
            # Same transaction: the kind's rows (e.g. alert_session feedback) land with the score or not at all.
            finished = FinalizedScore(
                score_id, status, total, passed, final["b_partial"], final["b_error_kind"], final["b_error_message"]
            )
            kind.on_finalized(session, finished, list(comps), criteria)
        observability.score_finished(row.suite_name, status, passed, final["b_cost_usd"], calibration=calibration)
        if row.batch_id is not None:
            _finish_batch_after_commit(session, row.batch_id)
    return set(active)


def cache_read_ratio(usage: dict[str, int]) -> float | None:
    """Share of prompt tokens served from the prompt cache."""
    prompt = sum(usage.get(k, 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    return round(usage.get("cache_read_input_tokens", 0) / prompt, 6) if prompt else None


def _sum_usage(usages: Any) -> dict[str, int]:
    total: Counter[str] = Counter()
    for usage in usages:
        if usage:
            total.update({k: int(v) for k, v in usage.items() if isinstance(v, int | float)})
    return dict(total)


def _active_left(session: Session, batch_id: uuid.UUID) -> bool:
    return session.execute(_ACTIVE_SCORE_OF_BATCH, {"b_batch_id": batch_id}).first() is not None


_ACTIVE_SCORE_OF_BATCH = (
    select(_s.id).where(_s.batch_id == bindparam("b_batch_id"), _s.status.in_(ACTIVE_SCORE_STATUSES)).limit(1)
)


def _finish_batch_after_commit(session: Session, batch_id: uuid.UUID) -> None:
    """Once this transaction (which finished a score of the batch) commits, see whether the batch is done.

    After the commit, not inside it: of several transactions finishing a batch's last scores at once,
    each sees the others' scores still active, but the last to commit sees them all finished. And not
    a counter on the batch row: every landing would queue on that row's lock until its commit. A
    crash between the commit and the check leaves the batch to the reconciler."""
    def finish() -> None:
        with transaction() as fresh:
            if not _active_left(fresh, batch_id):  # the usual answer, read without taking the row's lock
                batch = fresh.get(Batch, batch_id, with_for_update=True, populate_existing=True)
                if batch is not None:
                    _complete_batch_if_done(fresh, batch)

    after_commit(session, ("finish_batch", batch_id), finish)


def _complete_batch_if_done(session: Session, batch: Batch) -> None:
    """Complete a batch none of whose scores is active any more (the caller holds its row's lock)."""
    if batch.status in ("running", "budget_exhausted") and batch.finished_at is None:
        if _active_left(session, batch.id):
            return
        if batch.status == "running":
            batch.status = "completed"
        batch.finished_at = utcnow()
        batch.summary = {**(batch.summary or {}), **batch_summary(session, batch.id)}
        if "calibration" in batch.summary:
            from assay.scoring.trust.calibration import finish_run

            finish_run(session, batch)  # the judge's noise estimates, in the same transaction


# --- budgets ----------------------------------------------------------------------------------------------

BUDGET_EXHAUSTED = "budget_exhausted"


# Whether a component's batch has spent its budget (judge calls must stop), or has one at all, as a
# scalar subquery for the claim's RETURNING. Plain SQL: SQLAlchemy drops table names from a RETURNING
# clause on SQLite, which leaves a joined subquery's columns ambiguous there.
_BUDGET_STATE_SQL = (
    "(SELECT CASE WHEN {test} THEN 1 ELSE 0 END"
    " FROM scores AS assay_s JOIN batches AS assay_b ON assay_b.id = assay_s.batch_id"
    " WHERE assay_s.id = score_components.score_id)"
)
_SPENT = (
    f"assay_b.status = '{BUDGET_EXHAUSTED}'"
    " OR (assay_b.budget_usd IS NOT NULL AND assay_b.spent_usd >= assay_b.budget_usd)"
)
_BUDGETED = "assay_b.budget_usd IS NOT NULL"


def _budget_state(test: str, wanted: bool) -> Any:
    """1 or 0 for a component's batch (``_SPENT``, ``_BUDGETED``), or a constant 0 when not ``wanted``."""
    return literal_column(_BUDGET_STATE_SQL.format(test=test) if wanted else "0")


def stop_for_budget(session: Session, ref: ComponentRef, owner: str) -> None:
    """The batch's budget is spent: end the batch ``budget_exhausted`` and cancel this score and every
    score not planned yet (finished scores are kept). Scores already planned are cancelled one by one
    as their judge tasks arrive, without a call; a call already in flight still lands."""
    batch_id = session.scalar(select(Score.batch_id).where(Score.id == ref.score_id))
    batch = session.get(Batch, batch_id, with_for_update=True, populate_existing=True) if batch_id else None
    if batch is None:
        return
    now = utcnow()
    reason = f"budget exhausted: spent ${batch.spent_usd:.4f} of ${batch.budget_usd or 0:.4f}"
    cancelled = {"status": "cancelled", "completed_at": now, "error_kind": BUDGET_EXHAUSTED, "error_message": reason}
    unplanned = 0
    if batch.status in ("planning", "running"):
        batch.status = BUDGET_EXHAUSTED
        unplanned = session.execute(
            update(Score)
            .where(Score.batch_id == batch.id, Score.status == "pending", Score.position > batch.planned_position)
            .values(**cancelled)
        ).rowcount or 0
    c = _components.c
    session.execute(
        update(_components)
        .where(
            c.score_id == ref.score_id,
            c.status.not_in(LANDED_COMPONENT_STATUSES),
            # Another task's live lease means a call in flight: let it land (it is paid for).
            or_(c.status != "in_progress", c.lease_owner == owner, c.lease_expires_at < now),
        )
        .values(status="cancelled", reason=reason, lease_owner=None, lease_expires_at=None, run_after=None)
    )
    this = session.execute(
        update(Score).where(Score.id == ref.score_id, Score.status.in_(ACTIVE_SCORE_STATUSES)).values(**cancelled)
    ).rowcount or 0
    session.flush()
    _complete_batch_if_done(session, batch)
    _finish_batch_after_commit(session, batch.id)  # a landing may be finishing the last score right now
    log.warning("batch %s: %s; cancelled %d score(s)", batch.id, reason, unplanned + this)


# --- summaries and progress -------------------------------------------------------------------------------


def batch_counts(session: Session, batch_id: uuid.UUID, *, machine_only: bool = False) -> dict[str, int]:
    """Scores of a batch by outcome; ``machine_only``: calibration repeats left out (verdict summaries),
    else every score (progress)."""
    rows = session.execute(
        select(
            Score.status,
            func.count(),
            func.sum(case((Score.passed.is_(True), 1), else_=0)),
            func.sum(case((Score.partial.is_(True), 1), else_=0)),
        )
        .where(Score.batch_id == batch_id, machine_scores() if machine_only else true())
        .group_by(Score.status)
    ).all()
    by_status = {status: n for status, n, _, _ in rows}
    passed = sum(p or 0 for _, _, p, _ in rows)
    completed = by_status.get("completed", 0)
    return {
        "pending": by_status.get("pending", 0),
        "in_progress": by_status.get("in_progress", 0),
        "completed": completed,
        "passed": passed,
        "failed": completed - passed,  # scored below the threshold (or blocked from passing)
        "errored": by_status.get("failed", 0) + by_status.get("timed_out", 0),
        "cancelled": by_status.get("cancelled", 0),
        "partial": sum(p or 0 for _, _, _, p in rows),
    }


def batch_summary(session: Session, batch_id: uuid.UUID) -> dict[str, Any]:
    """A batch's machine verdicts (counts, pass rate, mean total, per component, errors): calibration
    repeats are left out, so a calibration batch reports none. ``cost_usd`` and ``usage`` are what the
    batch spent, calibration calls included."""
    counts = batch_counts(session, batch_id, machine_only=True)
    components: dict[str, dict[str, Any]] = {}
    for name, status, n, mean in session.execute(
        select(ScoreComponent.component, ScoreComponent.status, func.count(), func.avg(ScoreComponent.score))
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(Score.batch_id == batch_id, machine_scores())
        .group_by(ScoreComponent.component, ScoreComponent.status)
    ):
        entry = components.setdefault(name, {"ok": 0, "failed": 0, "skipped": 0, "mean": None, "median": None})
        if status in entry:
            entry[status] = n
        if status == "ok":
            entry["mean"] = round(float(mean), 6) if mean is not None else None
    for name, entry in components.items():
        entry["median"] = _median_component(session, batch_id, name)
    errors = Counter(
        kind
        for (kind,) in session.execute(
            select(Score.error_kind).where(
                Score.batch_id == batch_id, Score.status.in_(("failed", "timed_out")), machine_scores()
            )
        )
    )
    scored = counts["completed"]
    total_stats = session.execute(
        select(
            func.avg(case((machine_scores(), Score.total), else_=None)), func.sum(Score.cost_usd)
        ).where(Score.batch_id == batch_id)
    ).one()
    usage = _sum_usage(
        u for (u,) in session.execute(select(Score.usage).where(Score.batch_id == batch_id, Score.usage.is_not(None)))
    )
    return {
        "counts": counts,
        "pass_rate": round(counts["passed"] / scored, 6) if scored else None,
        "mean_total": round(float(total_stats[0]), 6) if total_stats[0] is not None else None,
        "cost_usd": float(total_stats[1] or 0.0),
        "usage": usage,
        "cache_read_ratio": cache_read_ratio(usage),
        "components": components,
        "errors_by_kind": dict(errors),
    }


def _median_component(session: Session, batch_id: uuid.UUID, component: str) -> float | None:
    where = and_(
        Score.batch_id == batch_id, ScoreComponent.component == component, ScoreComponent.status == "ok", machine_scores()
    )
    if session.get_bind().dialect.name == "postgresql":
        value = session.scalar(
            select(func.percentile_cont(0.5).within_group(ScoreComponent.score))
            .select_from(ScoreComponent)
            .join(Score, Score.id == ScoreComponent.score_id)
            .where(where)
        )
        return round(float(value), 6) if value is not None else None
    values = session.scalars(
        select(ScoreComponent.score).join(Score, Score.id == ScoreComponent.score_id).where(where)
    ).all()
    return round(statistics.median(values), 6) if values else None


# --- reconciling ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReconcileReport:
    refs: list[ComponentRef]
    planning_batches: list[uuid.UUID]
    finished_batches: list[uuid.UUID]


def reconcile(
    session: Session, *, requeue_after_seconds: float, skip_pending_in: Collection[str] = (), limit: int = 5000
) -> ReconcileReport:
    """Find work a lost message left behind: expired leases, stale pending, overdue deferrals.

    Stale pending components of the queues in ``skip_pending_in`` (those with messages waiting) are
    left alone: their messages are most likely still queued. Only components of active scores count;
    the caller commits, then publishes the refs.
    """
    now = utcnow()
    stale = now - timedelta(seconds=requeue_after_seconds)
    stuck = or_(
        and_(ScoreComponent.status == "in_progress", ScoreComponent.lease_expires_at < now),
        and_(
            ScoreComponent.status == "pending",
            ScoreComponent.queue.not_in(list(skip_pending_in)),
            or_(ScoreComponent.enqueued_at.is_(None), ScoreComponent.enqueued_at < stale),
        ),
        # A deferral's own countdown message may have been lost: pick it up once it is well overdue.
        and_(ScoreComponent.status == "deferred", ScoreComponent.run_after < stale),
    )
    rows = session.execute(
        select(ScoreComponent.score_id, ScoreComponent.component, ScoreComponent.queue)
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(stuck, Score.status.in_(ACTIVE_SCORE_STATUSES))
        .limit(limit)
    ).all()
    refs = [ComponentRef(r.score_id, r.component, r.queue) for r in rows]
    for ref in refs:
        session.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component)
            .values(enqueued_at=now)
        )
    # A planner waiting on backpressure checks in too (note_planner_waiting): only silent ones restart.
    planning = list(
        session.scalars(
            select(Batch.id).where(
                Batch.status == "planning", or_(Batch.planner_seen_at.is_(None), Batch.planner_seen_at < stale)
            )
        )
    )
    # Batches whose last score finished in a transaction whose worker died before it could check.
    finished = session.scalars(
        select(Batch)
        .where(
            Batch.status.in_(("running", BUDGET_EXHAUSTED)),
            Batch.finished_at.is_(None),
            ~exists().where(Score.batch_id == Batch.id, Score.status.in_(ACTIVE_SCORE_STATUSES)),
        )
        .with_for_update(skip_locked=True)
    ).all()
    for batch in finished:
        _complete_batch_if_done(session, batch)
    return ReconcileReport(refs, planning, [batch.id for batch in finished])


def note_planner_waiting(session: Session, batch_id: uuid.UUID) -> None:
    """A planner paused by backpressure is alive: say so, so the reconciler starts no second one."""
    session.execute(update(Batch).where(Batch.id == batch_id).values(planner_seen_at=utcnow()))


def expire_poison(session: Session, ref: ComponentRef, attempts: int, max_attempts: int) -> bool:
    """A component claimed more than ``max_attempts`` times keeps crashing or outliving its worker: fail it."""
    if attempts <= max_attempts:
        return False
    last_error = session.scalar(
        select(ScoreComponent.reason).where(
            ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component
        )
    )
    why = f"last error: {last_error}" if last_error else "the worker died or ran past its lease each time"
    land(session, ref, ComponentResult.failed(f"gave up after {attempts - 1} attempts; {why}"), timed_out=not last_error)
    return True
