"""Claims and leases: a component is leased to one worker before any slow or paid work, given back
with a deferral, and its spend is kept across attempts."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    case,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from assay.scoring.pipeline.budgets import BUDGET_SPENT, BUDGETED, budget_state, charge_score
from assay.scoring.pipeline.components import COMPONENTS as _components
from assay.scoring.pipeline.components import JUDGE_QUEUES, ComponentRef, sum_usage
from assay.scoring.pipeline.components import SCORES as _scores
from assay.scoring.store.models import (
    LANDED_COMPONENT_STATUSES,
    ScoreComponent,
    utcnow,
)


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
            budget_state(BUDGET_SPENT, check_budget).label("budget_spent"),
            budget_state(BUDGETED, check_budget).label("budgeted"),
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
        (c.queue.in_(JUDGE_QUEUES), bindparam("judge_until", now + timedelta(seconds=judge_seconds), c.lease_expires_at.type)),
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


def spend_so_far(
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
    merged = sum_usage([prior_usage, usage])
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
    spend = spend_so_far(session, ref, usage, cost_usd, claim)
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
