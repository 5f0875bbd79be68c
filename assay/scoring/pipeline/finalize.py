"""Finalizing a score whose components have all landed: total, pass, pass blockers and status, then
the kind's and the features' finalize hooks, in the landing's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Integer,
    Text,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from assay import observability
from assay.scoring.kinds import get_kind
from assay.scoring.metrics.registry import PASS_BLOCKER
from assay.scoring.pipeline.completion import finish_batch_after_commit
from assay.scoring.pipeline.components import COMPONENTS as _components
from assay.scoring.pipeline.components import SCORES as _scores
from assay.scoring.pipeline.components import sum_usage
from assay.scoring.pipeline.hooks import Finalized, scores_finalized
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    Item,
    utcnow,
)
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.loader import Criteria

_c, _s = _components.c, _scores.c


# What finalizing needs of a score's row: the landing that completes it reads these (``scores`` below).
FINALIZING_COLUMNS = (
    _s.components_landed, _s.components_total, _s.batch_id,
    _s.status, _s.criteria_hash, _s.error_kind, _s.suite_name, _s.item_id, _s.calibration_run_id,
)


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
        rows = comps_of[score_id]
        # A jury member's row is part of its jury's result, not a component of the total: a member that
        # failed leaves its jury landed when the quorum holds. Its cost counts.
        comps = comps_of[score_id] = [comp for comp in rows if comp.component in criteria.components]
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
        cost = sum(comp.cost_usd or 0.0 for comp in rows)
        finals.append(
            {
                "b_score_id": score_id,
                "b_status": status,
                "b_total": total,
                "b_passed": passed,
                "b_partial": partial,
                "b_error_kind": error_kind,
                "b_error_message": error_message,
                "b_usage": sum_usage(comp.usage for comp in rows) or None,
                "b_cost_usd": cost,
                "b_now": now,
                "b_landed": count.get("b_landed", 0),
                "b_raw_output": count.get("b_raw_output"),
            }
        )
    session.execute(_FINALIZE, finals)
    scores_finalized(
        session,
        [
            Finalized(
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
            finish_batch_after_commit(session, row.batch_id)
    return set(active)
