"""Juries in the pipeline: a jury component lands, with the aggregate of its members' verdicts, in the
transaction that lands its last member (``@derives_components``; the suite side and the aggregation
rules are in :mod:`assay.scoring.suites.jury`). The pipeline imports none of this (invariant 10)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.hooks import derives_components
from assay.scoring.store.models import LANDED_COMPONENT_STATUSES, ScoreComponent
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.jury import SEPARATOR, JuryJudge, MemberOutcome, aggregate
from assay.scoring.suites.loader import Criteria


def _juries_touched(session: Session, landed: Sequence[tuple[uuid.UUID, str, str]]) -> dict[tuple[uuid.UUID, str], JuryJudge]:
    """(score id, jury component) -> its jury, for each jury one of whose members is among ``landed``."""
    criteria_of: dict[str, Criteria] = {}
    touched: dict[tuple[uuid.UUID, str], JuryJudge] = {}
    for score_id, row, criteria_hash in landed:
        component, separator, _ = row.partition(SEPARATOR)
        if not separator:
            continue
        if criteria_hash not in criteria_of:
            criteria_of[criteria_hash] = load_criteria(session, criteria_hash)
        spec = criteria_of[criteria_hash].components.get(component)
        if spec is not None and spec.jury is not None:
            touched[(score_id, component)] = spec.jury
    return touched


@derives_components
def land_juries(session: Session, landed: Sequence[tuple[uuid.UUID, str, str]]) -> list[tuple[uuid.UUID, str, Any]]:
    """The juries whose members have all landed now, each with its aggregate (skipped below its quorum)."""
    touched = _juries_touched(session, landed)
    if not touched:
        return []
    keys = [
        (score_id, row)
        for (score_id, component), jury in touched.items()
        for row in (component, *(f"{component}{SEPARATOR}{m.name}" for m in jury.judges))
    ]
    found = {
        (r.score_id, r.component): r
        for r in session.execute(
            select(
                ScoreComponent.score_id, ScoreComponent.component, ScoreComponent.status, ScoreComponent.score,
                ScoreComponent.details, ScoreComponent.reason, ScoreComponent.cost_usd,
            ).where(tuple_(ScoreComponent.score_id, ScoreComponent.component).in_(keys))
        )
    }
    out: list[tuple[uuid.UUID, str, Any]] = []
    for (score_id, component), jury in touched.items():
        own = found.get((score_id, component))
        if own is None or own.status in LANDED_COMPONENT_STATUSES:
            continue  # landed already (a duplicate landing, or cancelled)
        members = {m.name: found.get((score_id, f"{component}{SEPARATOR}{m.name}")) for m in jury.judges}
        if any(r is None or r.status not in LANDED_COMPONENT_STATUSES for r in members.values()):
            continue  # the last member's landing lands the jury
        outcomes = {
            name: MemberOutcome(r.status, r.score, r.details, r.reason, r.cost_usd or 0.0) for name, r in members.items()
        }
        result = aggregate(component, jury, outcomes)
        if result.score is None:
            out.append((score_id, component, ComponentResult.skipped(result.reason or "jury: no quorum", result.details)))
        else:
            out.append((score_id, component, ComponentResult("ok", result.score, result.details)))
    return out
