"""Comparing two criteria hashes over the items scored under both: totals, flips, component shifts, cost.

An item is compared when it has a ``completed`` score under each hash; with several, the latest by
``completed_at`` counts. The pairing is done in SQL with a window function (PostgreSQL and SQLite
both have them), so a diff over a million items never loads them: the aggregates are grouped
queries, the per-item rows a page or a server-side stream.

A hash may be given in full or as a unique prefix of at least 8 hex characters.

The mean delta and each component's mean shift carry a paired bootstrap 95 % interval, the pass/fail
flips McNemar's exact test, and the deltas wins / ties / losses (``assay.scoring.trust.stats``). Beside every
mean difference over n items stands the judge's noise floor across the two hashes,
1.96·√((σ1² + σ2²)/n), from each hash's latest calibration (``assay.scoring.trust.noise``), or the note
"no noise floor measured"; an item whose |delta| exceeds 1.96·√(σ1² + σ2²) is flagged ``beyond_noise``.
These statistics fetch the per-item deltas (one float per compared item, in chunks).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from sqlalchemy import Select, Subquery, and_, case, distinct, func, select
from sqlalchemy.orm import Session, aliased

from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    TOTAL_COMPONENT,
    CriteriaDefinition,
    Item,
    Score,
    ScoreComponent,
    SuiteRecord,
)
from assay.scoring.suites.history import criteria_changes
from assay.scoring.trust import stats
from assay.scoring.trust.noise import NoiseFloor, latest_noise

PASS_TO_FAIL = "pass→fail"
FAIL_TO_PASS = "fail→pass"
MIN_PREFIX = 8
_HEX = re.compile(r"[0-9a-f]+")

DiffOrder = Literal["delta", "item"]


@dataclass(frozen=True)
class DiffItem:
    item_id: uuid.UUID
    external_id: str | None
    old_total: float
    new_total: float
    delta: float
    old_passed: bool
    new_passed: bool
    flip: str | None
    beyond_noise: bool | None = None  # |delta| above the per-item noise floor; None when not measured


@dataclass(frozen=True)
class NoiseBeside:
    """The judge's noise floor beside a mean difference over n items."""

    noise_floor: float | None
    beyond_noise: bool | None  # |mean difference| > noise_floor
    noise_note: str | None  # "no noise floor measured" when there is none


@dataclass(frozen=True)
class ComponentShift:
    component: str
    n: int  # paired items where the component has a score under both hashes
    mean_old: float | None
    mean_new: float | None
    mean_shift: float | None
    interval: stats.MeanDifference
    noise: NoiseBeside


@dataclass(frozen=True)
class DiffSummary:
    items_compared: int
    items_only_from: int
    items_only_to: int
    mean_old_total: float | None
    mean_new_total: float | None
    mean_delta: float | None
    pass_to_fail: int
    fail_to_pass: int
    cost_usd: float  # the compared scores under `to`: what the new run cost
    cost_usd_from: float  # the same items under `from`, for reference
    components: list[ComponentShift]
    components_only_from: list[str]
    components_only_to: list[str]
    delta_interval: stats.MeanDifference  # bootstrap 95 % interval of mean_delta
    noise: NoiseBeside  # beside mean_delta
    tally: stats.Tally  # wins: new total higher
    mcnemar: stats.McNemar
    item_noise_floor: float | None
    noise_from: NoiseFloor | None
    noise_to: NoiseFloor | None


@dataclass(frozen=True)
class CriteriaDiff:
    suite: str | None
    from_hash: str
    to_hash: str
    summary: DiffSummary
    total_rows: int  # rows the page was taken from (all compared items, or only the flips)
    items: list[DiffItem]
    criteria_change: dict[str, Any]  # what changed from one criteria to the other (suites.history)


def _resolve(session: Session, value: str, side: str) -> CriteriaDefinition:
    wanted = value.strip().lower()
    if len(wanted) < MIN_PREFIX or len(wanted) > 64 or not _HEX.fullmatch(wanted):
        raise BadRequest(f"'{side}' must be a criteria hash or a prefix of {MIN_PREFIX} to 64 hex characters, got {value!r}")
    rows = session.scalars(
        select(CriteriaDefinition).where(CriteriaDefinition.criteria_hash.startswith(wanted)).limit(2)
    ).all()
    if not rows:
        raise NotFound(f"no criteria with hash {value}", hash=value)
    if len(rows) > 1:
        raise BadRequest(f"criteria hash prefix {value} is ambiguous; give more characters", hash=value)
    return rows[0]


def resolve_pair(
    session: Session, *, suite: str | None, from_hash: str, to_hash: str
) -> tuple[CriteriaDefinition, CriteriaDefinition]:
    """The two definitions named by full hashes or prefixes; refuses an unknown suite and a self-diff."""
    if suite is not None:
        # A name no suite file can have (e.g. with a NUL, which PostgreSQL text refuses) is not looked up.
        if not suite.replace("_", "").replace("-", "").isalnum() or session.get(SuiteRecord, suite) is None:
            raise NotFound(f"no suite named {suite!r}")
    old, new = _resolve(session, from_hash, "from"), _resolve(session, to_hash, "to")
    if old.criteria_hash == new.criteria_hash:
        raise BadRequest(f"'from' and 'to' are the same criteria ({old.criteria_hash}); nothing to compare")
    return old, new


def _pairs(suite: str | None, from_hash: str, to_hash: str) -> Select[Any]:
    """One row per compared item: its latest completed score under each hash."""
    rank = func.row_number().over(
        partition_by=(Score.item_id, Score.criteria_hash), order_by=(Score.completed_at.desc(), Score.id.desc())
    )
    latest = select(
        Score.id, Score.item_id, Score.criteria_hash, Score.total, Score.passed, Score.cost_usd, rank.label("rank")
    ).where(Score.status == "completed", Score.criteria_hash.in_((from_hash, to_hash)), machine_scores())
    if suite is not None:
        latest = latest.where(Score.suite_name == suite)
    ranked = latest.cte("ranked")
    old, new = ranked.alias("old"), ranked.alias("new")
    flip = case(
        (and_(old.c.passed.is_(True), new.c.passed.is_(False)), PASS_TO_FAIL),
        (and_(old.c.passed.is_(False), new.c.passed.is_(True)), FAIL_TO_PASS),
        else_=None,
    )
    return (
        select(
            old.c.item_id,
            Item.external_id,
            old.c.total.label("old_total"),
            new.c.total.label("new_total"),
            (new.c.total - old.c.total).label("delta"),
            old.c.passed.label("old_passed"),
            new.c.passed.label("new_passed"),
            flip.label("flip"),
            old.c.id.label("old_score_id"),
            new.c.id.label("new_score_id"),
            old.c.cost_usd.label("old_cost"),
            new.c.cost_usd.label("new_cost"),
        )
        .select_from(old)
        .join(new, and_(new.c.item_id == old.c.item_id, new.c.criteria_hash == to_hash, new.c.rank == 1))
        .join(Item, Item.id == old.c.item_id)
        .where(old.c.criteria_hash == from_hash, old.c.rank == 1)
    )


def _item(row: Any, item_floor: float | None = None) -> DiffItem:
    return DiffItem(
        item_id=row.item_id,
        external_id=row.external_id,
        old_total=row.old_total,
        new_total=row.new_total,
        delta=row.delta,
        old_passed=row.old_passed,
        new_passed=row.new_passed,
        flip=row.flip,
        beyond_noise=None if item_floor is None else abs(row.delta) > item_floor,
    )


def _floats(session: Session, query: Select[Any], chunk: int = 50_000) -> np.ndarray:
    """A one-column query's numbers, fetched in chunks."""
    parts = [
        np.asarray([r[0] for r in part], dtype=np.float64)
        for part in session.execute(query.execution_options(yield_per=chunk)).partitions()
    ]
    return np.concatenate(parts) if parts else np.empty(0)


def _sigma(noise: NoiseFloor | None, name: str) -> float | None:
    return None if noise is None else noise.sigma_w.get(name)


def _beside(mean: float | None, sigma_from: float | None, sigma_to: float | None, n: int) -> NoiseBeside:
    floor = stats.mean_diff_floor(sigma_from, sigma_to, n, same_hash=False)
    if floor is None:
        return NoiseBeside(None, None, stats.NO_NOISE_FLOOR)
    return NoiseBeside(floor, None if mean is None else abs(mean) > floor, None)


def item_noise_floor(session: Session, from_hash: str, to_hash: str) -> float | None:
    """1.96·√(σ1² + σ2²) from the two hashes' latest calibrations of the total, or None."""
    sigmas = (_sigma(latest_noise(session, h), TOTAL_COMPONENT) for h in (from_hash, to_hash))
    return stats.item_floor(*sigmas, same_hash=False)


def _component_names(definition: CriteriaDefinition) -> set[str]:
    return set((definition.criteria_content or {}).get("components") or {})


def _summary(
    session: Session, pairs: Subquery, suite: str | None, old: CriteriaDefinition, new: CriteriaDefinition
) -> DiffSummary:
    totals = session.execute(
        select(
            func.count(),
            func.avg(pairs.c.old_total),
            func.avg(pairs.c.new_total),
            func.avg(pairs.c.delta),
            func.coalesce(func.sum(case((pairs.c.flip == PASS_TO_FAIL, 1), else_=0)), 0),
            func.coalesce(func.sum(case((pairs.c.flip == FAIL_TO_PASS, 1), else_=0)), 0),
            func.coalesce(func.sum(pairs.c.new_cost), 0.0),
            func.coalesce(func.sum(pairs.c.old_cost), 0.0),
        )
    ).one()
    compared = totals[0]
    per_hash = select(Score.criteria_hash, func.count(distinct(Score.item_id))).where(
        Score.status == "completed", Score.criteria_hash.in_((old.criteria_hash, new.criteria_hash)), machine_scores()
    )
    if suite is not None:
        per_hash = per_hash.where(Score.suite_name == suite)
    scored: dict[str, int] = dict(session.execute(per_hash.group_by(Score.criteria_hash)).all())

    old_names, new_names = _component_names(old), _component_names(new)
    common = sorted(old_names & new_names)
    noise_old, noise_new = latest_noise(session, old.criteria_hash), latest_noise(session, new.criteria_hash)
    oc, nc = aliased(ScoreComponent), aliased(ScoreComponent)
    # A skipped or failed component has no score: such pairs are left out of that component's n.
    shifts = {
        row.component: row
        for row in session.execute(
            select(
                oc.component,
                func.count().label("n"),
                func.avg(oc.score).label("mean_old"),
                func.avg(nc.score).label("mean_new"),
                func.avg(nc.score - oc.score).label("mean_shift"),
            )
            .select_from(pairs)
            .join(oc, oc.score_id == pairs.c.old_score_id)
            .join(nc, and_(nc.score_id == pairs.c.new_score_id, nc.component == oc.component))
            .where(oc.component.in_(common), oc.score.is_not(None), nc.score.is_not(None))
            .group_by(oc.component)
        )
    }

    def component(name: str) -> ComponentShift:
        found = shifts.get(name)
        n = found.n if found else 0
        interval = stats.paired_bootstrap(
            _floats(
                session,
                select(nc.score - oc.score)
                .select_from(pairs)
                .join(oc, and_(oc.score_id == pairs.c.old_score_id, oc.component == name))
                .join(nc, and_(nc.score_id == pairs.c.new_score_id, nc.component == name))
                .where(oc.score.is_not(None), nc.score.is_not(None)),
            )
            if n
            else []
        )
        mean = found.mean_shift if found else None
        noise = _beside(mean, _sigma(noise_old, name), _sigma(noise_new, name), n)
        if found is None:
            return ComponentShift(name, 0, None, None, None, interval, noise)
        return ComponentShift(name, n, found.mean_old, found.mean_new, mean, interval, noise)

    deltas = _floats(session, select(pairs.c.delta)) if compared else np.empty(0)
    sigma_old, sigma_new = _sigma(noise_old, TOTAL_COMPONENT), _sigma(noise_new, TOTAL_COMPONENT)
    return DiffSummary(
        items_compared=compared,
        items_only_from=scored.get(old.criteria_hash, 0) - compared,
        items_only_to=scored.get(new.criteria_hash, 0) - compared,
        mean_old_total=totals[1],
        mean_new_total=totals[2],
        mean_delta=totals[3],
        pass_to_fail=totals[4],
        fail_to_pass=totals[5],
        cost_usd=totals[6],
        cost_usd_from=totals[7],
        components=[component(name) for name in common],
        components_only_from=sorted(old_names - new_names),
        components_only_to=sorted(new_names - old_names),
        delta_interval=stats.paired_bootstrap(deltas),
        noise=_beside(totals[3], sigma_old, sigma_new, compared),
        tally=stats.tally(deltas),
        mcnemar=stats.mcnemar_exact(totals[4], totals[5]),
        item_noise_floor=stats.item_floor(sigma_old, sigma_new, same_hash=False),
        noise_from=noise_old,
        noise_to=noise_new,
    )


def criteria_diff(
    session: Session,
    *,
    suite: str | None,
    from_hash: str,
    to_hash: str,
    limit: int = 100,
    offset: int = 0,
    order: DiffOrder = "delta",
    flips_only: bool = False,
) -> CriteriaDiff:
    """The aggregates and one page of per-item rows. ``order="delta"`` lists the largest |delta| first;
    ``"item"`` is by item id. Ties fall back to the item id, so pages never overlap."""
    old, new = resolve_pair(session, suite=suite, from_hash=from_hash, to_hash=to_hash)
    pairs = _pairs(suite, old.criteria_hash, new.criteria_hash).subquery("pairs")
    summary = _summary(session, pairs, suite, old, new)
    rows = select(pairs)
    if flips_only:
        rows = rows.where(pairs.c.flip.is_not(None))
    if order == "delta":
        rows = rows.order_by(func.abs(pairs.c.delta).desc(), pairs.c.item_id)
    else:
        rows = rows.order_by(pairs.c.item_id)
    page = session.execute(rows.limit(limit).offset(offset)).all()
    return CriteriaDiff(
        suite=suite,
        from_hash=old.criteria_hash,
        to_hash=new.criteria_hash,
        summary=summary,
        total_rows=summary.pass_to_fail + summary.fail_to_pass if flips_only else summary.items_compared,
        items=[_item(r, summary.item_noise_floor) for r in page],
        criteria_change=criteria_changes(old.criteria_content, new.criteria_content),
    )


def iter_diff_items(
    session: Session,
    *,
    suite: str | None,
    from_hash: str,
    to_hash: str,
    flips_only: bool = False,
    chunk: int = 1000,
    item_floor: float | None = None,
) -> Iterator[DiffItem]:
    """Every compared item by item id, fetched ``chunk`` rows at a time (a server-side cursor on
    PostgreSQL), so memory stays flat. Takes full hashes: resolve them first with ``resolve_pair``.
    ``item_floor`` (see :func:`item_noise_floor`) sets each item's ``beyond_noise``."""
    pairs = _pairs(suite, from_hash, to_hash).subquery("pairs")
    rows = select(pairs).order_by(pairs.c.item_id)
    if flips_only:
        rows = rows.where(pairs.c.flip.is_not(None))
    for row in session.execute(rows.execution_options(yield_per=chunk)):
        yield _item(row, item_floor)
