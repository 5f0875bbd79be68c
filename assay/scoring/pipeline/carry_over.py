"""Carrying a landed result over to a re-score: a component whose fingerprint is unchanged is copied
from the item's latest finished score instead of being computed again."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError
from assay.scoring.pipeline.components import COMPONENTS as _components
from assay.scoring.pipeline.components import METRICS_QUEUES, ComponentRef
from assay.scoring.pipeline.components import SCORES as _scores
from assay.scoring.pipeline.finalize import FINALIZING_COLUMNS, finalize_score
from assay.scoring.pipeline.hooks import derived_landings
from assay.scoring.pipeline.landing import Landing, land_many
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    FINISHED_SCORE_STATUSES,
    ScoreComponent,
)
from assay.scoring.suites.criteria import load_criteria

_c, _s = _components.c, _scores.c


# A skipped judge is not carried: its skip (no API key, say) says nothing about the item, and a
# re-score with a key must run it. A metric's skip is as deterministic as its score.
_CARRYABLE = or_(_c.status == "ok", and_(_c.status == "skipped", _c.queue.in_(METRICS_QUEUES)))


# A re-score's carried-over components count on their score all at once (see ``create_components``).
_BUMP_CARRIED = (
    update(_scores)
    .where(_s.id == bindparam("b_score_id"))
    .values(components_landed=_s.components_landed + bindparam("b_landed", type_=Integer))
    .returning(*FINALIZING_COLUMNS)
)


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
                fingerprints[key] = criteria.component_fingerprint(component) if component in criteria.rows else None
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


def land_carried(session: Session, carried_rows: list[dict[str, Any]]) -> None:
    """Insert carried-over components as landed, count them on their scores, and finalize a score
    they complete. Only rows inserted now are counted: planning a chunk twice counts nothing twice."""
    inserted = session.execute(
        dialect_insert(session)(ScoreComponent).on_conflict_do_nothing().returning(_c.score_id, _c.component),
        carried_rows,
    ).all()
    landed_rows: list[tuple[uuid.UUID, str, str]] = []
    for score_id, landed in Counter(score_id for score_id, _ in inserted).items():
        score = session.execute(_BUMP_CARRIED, {"b_score_id": score_id, "b_landed": landed}).one()
        if score.components_landed == score.components_total:
            finalize_score(session, score_id, score=score)
        landed_rows += [(found, component, score.criteria_hash) for found, component in inserted if found == score_id]
    # Members carried over whose jury did not (its aggregation changed): the jury lands from them now.
    derived = derived_landings(session, landed_rows)
    if derived:
        land_many(session, [Landing(ComponentRef(score_id, component, ""), result) for score_id, component, result in derived])
