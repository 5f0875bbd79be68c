"""Landing: a component's result is recorded once, counted on its score, and the landing that
completes a score finalizes it in the same transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    func,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.budgets import charge_batch
from assay.scoring.pipeline.claims import Claim, spend_so_far
from assay.scoring.pipeline.components import COMPONENTS as _components
from assay.scoring.pipeline.components import SCORES as _scores
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.finalize import FINALIZING_COLUMNS, finalize_scores
from assay.scoring.pipeline.hooks import derived_landings
from assay.scoring.store.models import (
    LANDED_COMPONENT_STATUSES,
    utcnow,
)

_c, _s = _components.c, _scores.c


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
# The landing's scores, locked before it counts on them: whether it completes a score decides which
# write counts it (concurrent landings of the same score's other components wait here). Locked in id
# order, so that two landings sharing scores cannot lock them crosswise.
_COUNTING_SCORES = (
    select(_s.id, *FINALIZING_COLUMNS)
    .where(_s.id.in_(bindparam("b_score_ids", expanding=True)))
    .order_by(_s.id)
    .with_for_update()
)


def _landing_row(ref: ComponentRef, result: ComponentResult, now: Any) -> dict[str, Any]:
    """The parameters of ``_LAND_COMPONENTS`` a result gives (its spend is added by the caller)."""
    return {
        "b_score_id": ref.score_id,
        "b_component": ref.component,
        "b_status": result.status,
        "b_score": result.score,
        "b_details": result.details or None,
        "b_reason": result.reason,
        "b_now": now,
        "b_raw_output": result.raw_output,
    }


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
        spend = spend_so_far(session, ref, landing.result.usage, landing.result.cost_usd, landing.claim)
        rows[ref] = {
            **_landing_row(ref, landing.result, now),
            "b_usage": spend["usage"],
            "b_cost_usd": spend["cost_usd"],
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
    # With their scores locked, the rows derived from these (a jury from its members) see every
    # sibling that landed before: concurrent landings of one score's members wait on its lock above.
    derived = derived_landings(session, [(ref.score_id, ref.component, counted[ref.score_id].criteria_hash) for ref in landed])
    for score_id, component, result in derived:
        row = {**_landing_row(ComponentRef(score_id, component, ""), result, now), "b_usage": None, "b_cost_usd": 0.0}
        if session.scalar(_LAND_COMPONENT, row) is not None:
            counts[score_id]["b_landed"] += 1
    for ref in landed:
        claim = by_ref[ref].claim
        if claim is None or claim.budgeted:
            charge_batch(session, counted[ref.score_id].batch_id, by_ref[ref].result.cost_usd)
    complete = {
        score_id: score for score_id, score in counted.items()
        if score.components_landed + counts[score_id]["b_landed"] == score.components_total
    }
    finalized = finalize_scores(session, complete, items=items, counts=counts) if complete else set()
    counting = [count for score_id, count in counts.items() if score_id not in finalized]
    if counting:
        session.execute(_COUNT_LANDINGS, counting)
    return set(landed)
