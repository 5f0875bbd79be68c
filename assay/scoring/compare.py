"""Comparing two batches pair by pair, with intervals, McNemar's test and the judge's noise floor.

Items are matched by external id. Each batch's own scores count (the scores the batch carries, not each
item's latest), and only machine scores (:func:`assay.scoring.store.filters.machine_scores`): a
calibration repeat never enters a comparison.

- A score is *usable* when it is ``completed`` and not ``partial``. Partial, failed (and timed out),
  pending (and in progress) and cancelled scores are counted apart per batch; a matched pair where
  either side is not usable is *excluded* from the paired statistics and counted.
- Items whose external id is in one batch only are counted and the first ``LIST_LIMIT`` are listed.
  Items without an external id, and items whose external id repeats inside the batch (a re-scoring
  batch over two uploads of the same id), cannot be matched: they are counted apart, never guessed.
- The report: the paired mean difference of the total (B − A) with its bootstrap 95 % interval;
  wins / ties / losses of B against A; the pass-rate difference with the exact McNemar test; each
  shared component's mean shift with its interval; the items that moved most and those that flipped.
  Beside every mean difference stands the judge's noise floor over those n pairs (from the latest
  calibration of each batch's criteria hash; "no noise floor measured" without one), and each listed
  item says whether its change is beyond the per-item floor.
- Two batches under different criteria hashes or suites get a warning: the difference then mixes the
  rubric with the outputs.

Reports are cached per pair of batches in this process. The cache key holds each batch's completion
state (status, finish time, finished scores and the latest completion time) and the noise estimates
used, so a batch still running, a retried batch or a new calibration is never served stale.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import CTE, Select, and_, case, exists, func, literal, select, text
from sqlalchemy.orm import Session, aliased

from assay.scoring import stats
from assay.scoring.diff import FAIL_TO_PASS, PASS_TO_FAIL
from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.noise import NoiseFloor, latest_noise
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    TOTAL_COMPONENT,
    Batch,
    CriteriaDefinition,
    Item,
    Score,
    ScoreComponent,
)

TOTAL = TOTAL_COMPONENT
LIST_LIMIT = 100
CACHE_SIZE = 32
FETCH_CHUNK = 50_000
STATES = ("usable", "partial", "failed", "pending", "cancelled")
# The row kinds of the CSV export's `match` column.
PAIRED, EXCLUDED, ONLY_A, ONLY_B, NO_ID, REPEATED_ID = (
    "paired", "excluded", "only in a", "only in b", "no external id", "repeated external id",
)
CSV_COLUMNS = [
    "external_id", "match", "a_item_id", "b_item_id", "a_status", "b_status", "a_total", "b_total",
    "delta", "a_passed", "b_passed", "flip", "beyond_noise",
]


@dataclass(frozen=True)
class SideCounts:
    """One batch's scores, by state and by whether they could be matched."""

    scores: int
    usable: int  # completed, not partial
    partial: int
    failed: int  # failed or timed out
    pending: int  # pending or in progress
    cancelled: int
    no_external_id: int
    repeated_external_id: int  # scores whose external id repeats inside the batch
    only_here: int  # external ids the other batch lacks


@dataclass(frozen=True)
class Side:
    batch_id: uuid.UUID
    suite: str
    criteria_hash: str
    status: str
    counts: SideCounts
    only_here_ids: list[str]  # the first LIST_LIMIT of them, by external id
    noise: NoiseFloor | None


@dataclass(frozen=True)
class Shift:
    """A paired mean difference (B − A) with its interval and the noise floor beside it."""

    name: str  # "total", "pass_rate" or a component name
    n: int
    mean_a: float | None
    mean_b: float | None
    difference: stats.MeanDifference
    noise_floor: float | None  # None: no noise floor measured for it
    beyond_noise: bool | None  # |mean difference| > noise floor; None without a floor or a mean
    noise_note: str | None


@dataclass(frozen=True)
class PairRow:
    external_id: str
    a_item_id: uuid.UUID
    b_item_id: uuid.UUID
    a_total: float
    b_total: float
    delta: float
    a_passed: bool
    b_passed: bool
    flip: str | None
    beyond_noise: bool | None  # |delta| beyond the per-item floor; None without one


@dataclass(frozen=True)
class Comparison:
    a: Side
    b: Side
    warnings: list[str]
    matched: int  # external ids in both batches
    paired: int  # matched pairs with a usable score on both sides: the n of the statistics
    excluded: int  # matched pairs left out (a side partial, failed, pending or cancelled)
    total: Shift
    tally: stats.Tally
    pass_rate: Shift
    mcnemar: stats.McNemar
    components: list[Shift]
    components_only_a: list[str]
    components_only_b: list[str]
    item_noise_floor: float | None  # |delta| above it is beyond the judge's noise
    moved_most: list[PairRow]
    flipped: list[PairRow]


# --- queries --------------------------------------------------------------------------------------


def _state() -> Any:
    return case(
        (and_(Score.status == "completed", Score.partial.is_(False), Score.total.is_not(None), Score.passed.is_not(None)), "usable"),
        (Score.status == "completed", "partial"),
        (Score.status.in_(("failed", "timed_out")), "failed"),
        (Score.status == "cancelled", "cancelled"),
        else_="pending",
    )


def _status_label() -> Any:
    return case((and_(Score.status == "completed", Score.partial.is_(True)), "partial"), else_=Score.status)


def _side_cte(batch_id: uuid.UUID, name: str) -> CTE:
    """One row per machine score of the batch, with its external id's count inside the batch."""
    return (
        select(
            Item.external_id.label("external_id"),
            Score.item_id.label("item_id"),
            Score.id.label("score_id"),
            _state().label("state"),
            _status_label().label("status"),
            Score.total.label("total"),
            Score.passed.label("passed"),
            func.count().over(partition_by=Item.external_id).label("copies"),
        )
        .join(Item, Item.id == Score.item_id)
        .where(Score.batch_id == batch_id, machine_scores())
        .cte(name)
    )


def _matchable(side: CTE) -> Any:
    return and_(side.c.external_id.is_not(None), side.c.copies == 1)


def _join(a: CTE, b: CTE, *columns: Any) -> Select[Any]:
    """The matched pairs: an external id once in each batch."""
    return select(*columns).join_from(a, b, and_(b.c.external_id == a.c.external_id, _matchable(b))).where(_matchable(a))


def _both_usable(a: CTE, b: CTE) -> Any:
    return and_(a.c.state == "usable", b.c.state == "usable")


def _has_partner(here: CTE, there: CTE) -> Any:
    other = there.alias()
    return exists().where(other.c.external_id == here.c.external_id, _matchable(other))


def _only(here: CTE, there: CTE) -> Any:
    return and_(_matchable(here), ~_has_partner(here, there))


def _flip(a: CTE, b: CTE) -> Any:
    return case(
        (and_(a.c.passed.is_(True), b.c.passed.is_(False)), PASS_TO_FAIL),
        (and_(a.c.passed.is_(False), b.c.passed.is_(True)), FAIL_TO_PASS),
        else_=None,
    )


def _counts(session: Session, side: CTE, other: CTE) -> SideCounts:
    by_state = dict(session.execute(select(side.c.state, func.count()).group_by(side.c.state)).all())
    unmatchable = session.execute(
        select(
            func.count().filter(side.c.external_id.is_(None)),
            func.count().filter(side.c.external_id.is_not(None), side.c.copies > 1),
            func.count().filter(_only(side, other)),
        )
    ).one()
    return SideCounts(
        scores=sum(by_state.values()),
        **{state: by_state.get(state, 0) for state in STATES},
        no_external_id=unmatchable[0],
        repeated_external_id=unmatchable[1],
        only_here=unmatchable[2],
    )


def _only_ids(session: Session, side: CTE, other: CTE) -> list[str]:
    rows = select(side.c.external_id).where(_only(side, other)).order_by(side.c.external_id).limit(LIST_LIMIT)
    return list(session.scalars(rows))


def _arrays(session: Session, query: Select[Any], width: int) -> np.ndarray:
    """The rows of ``query`` (all numbers) as one float array, fetched in chunks."""
    parts = [
        np.asarray(part, dtype=np.float64).reshape(-1, width)
        for part in session.execute(query.execution_options(yield_per=FETCH_CHUNK)).partitions()
    ]
    return np.concatenate(parts) if parts else np.empty((0, width))


def _components(definition: CriteriaDefinition | None) -> set[str]:
    return set(((definition.criteria_content if definition else None) or {}).get("components") or {})


@contextmanager
def _hash_joins(session: Session) -> Iterator[None]:
    """Joins of the two sides by external id run as hash or merge joins on PostgreSQL.

    Each side is a window over one batch's scores. Right after a batch is written its rows have no
    statistics yet, and the planner, expecting a row or two per side, picks a nested loop over the two
    windows: quadratic (minutes for 50,000 pairs). Hash and merge joins are linear whatever the estimate;
    the score_components lookups become one hash join per component."""
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        session.execute(text("SET LOCAL enable_nestloop = off"))
    try:
        yield
    finally:
        if postgres:
            session.execute(text("SET LOCAL enable_nestloop = on"))


# --- the report -----------------------------------------------------------------------------------


def _sigma(noise: NoiseFloor | None, name: str) -> float | None:
    return None if noise is None else noise.sigma_w.get(name)


def _shift(
    name: str, values: np.ndarray, sigmas: tuple[float | None, float | None] | None, same_hash: bool
) -> Shift:
    """``values``: n × 2 (A, B). ``sigmas``: the two sides' σw, or None where no floor applies."""
    n = len(values)
    difference = stats.paired_bootstrap(values[:, 1] - values[:, 0] if n else [])
    floor = None if sigmas is None else stats.mean_diff_floor(*sigmas, n, same_hash=same_hash)
    beyond = None if floor is None or difference.mean is None else abs(difference.mean) > floor
    return Shift(
        name=name,
        n=n,
        mean_a=float(values[:, 0].mean()) if n else None,
        mean_b=float(values[:, 1].mean()) if n else None,
        difference=difference,
        noise_floor=floor,
        beyond_noise=beyond,
        noise_note=None if floor is not None or sigmas is None else stats.NO_NOISE_FLOOR,
    )


def _pair_row(row: Any, item_floor: float | None) -> PairRow:
    delta = row.b_total - row.a_total
    return PairRow(
        external_id=row.external_id,
        a_item_id=row.a_item_id,
        b_item_id=row.b_item_id,
        a_total=row.a_total,
        b_total=row.b_total,
        delta=delta,
        a_passed=row.a_passed,
        b_passed=row.b_passed,
        flip=row.flip,
        beyond_noise=None if item_floor is None else abs(delta) > item_floor,
    )


def _pair_columns(a: CTE, b: CTE) -> list[Any]:
    return [
        a.c.external_id, a.c.item_id.label("a_item_id"), b.c.item_id.label("b_item_id"),
        a.c.total.label("a_total"), b.c.total.label("b_total"),
        a.c.passed.label("a_passed"), b.c.passed.label("b_passed"), _flip(a, b).label("flip"),
    ]


def load_batches(session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID) -> tuple[Batch, Batch]:
    """The two batches; refuses comparing a batch with itself and names a missing one."""
    if batch_a == batch_b:
        raise BadRequest("'a' and 'b' are the same batch; compare two different batches")
    found = []
    for side, batch_id in (("a", batch_a), ("b", batch_b)):
        batch = session.get(Batch, batch_id)
        if batch is None:
            raise NotFound(f"no batch {batch_id} (given as '{side}')", batch_id=str(batch_id))
        found.append(batch)
    return found[0], found[1]


def _fingerprint(session: Session, batch: Batch) -> tuple[Any, ...]:
    finished = session.execute(
        select(func.count(), func.max(Score.completed_at)).where(
            Score.batch_id == batch.id, Score.status.in_(("completed", "failed", "timed_out", "cancelled"))
        )
    ).one()
    return (batch.id, batch.status, batch.finished_at, finished[0], finished[1])


def _noise_key(noise: NoiseFloor | None) -> tuple[Any, ...] | None:
    return None if noise is None else (noise.run_id, noise.computed_at)


_cache: OrderedDict[tuple[Any, ...], Comparison] = OrderedDict()
_cache_lock = threading.Lock()


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def compare_batches(session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID) -> Comparison:
    """The report for batch B against batch A (differences are B − A); cached per pair and state."""
    a, b = load_batches(session, batch_a, batch_b)
    noise_a = latest_noise(session, a.criteria_hash)
    noise_b = noise_a if b.criteria_hash == a.criteria_hash else latest_noise(session, b.criteria_hash)
    key = (_fingerprint(session, a), _fingerprint(session, b), _noise_key(noise_a), _noise_key(noise_b))
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    with _hash_joins(session):
        result = _compare(session, a, b, noise_a, noise_b)
    with _cache_lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def _compare(session: Session, a: Batch, b: Batch, noise_a: NoiseFloor | None, noise_b: NoiseFloor | None) -> Comparison:
    same_hash = a.criteria_hash == b.criteria_hash
    warnings = []
    if a.suite_name != b.suite_name:
        warnings.append(
            f"the batches belong to different suites ({a.suite_name!r} and {b.suite_name!r}): "
            "the difference mixes the rubric with the outputs"
        )
    if not same_hash:
        warnings.append(
            f"the batches were scored under different criteria ({a.criteria_hash[:12]}… and {b.criteria_hash[:12]}…): "
            "the difference mixes the rubric with the outputs"
        )
    side_a, side_b = _side_cte(a.id, "side_a"), _side_cte(b.id, "side_b")
    counts = session.execute(_join(side_a, side_b, func.count(), func.count().filter(_both_usable(side_a, side_b)))).one()
    paired = _join(side_a, side_b, side_a.c.total, side_b.c.total, side_a.c.passed, side_b.c.passed).where(
        _both_usable(side_a, side_b)
    )
    values = _arrays(session, paired, 4)
    totals, verdicts = values[:, :2], values[:, 2:].astype(bool)
    sigma_total = (_sigma(noise_a, TOTAL), _sigma(noise_b, TOTAL))
    total = _shift("total", totals, sigma_total, same_hash)
    pass_rate = _shift("pass_rate", verdicts.astype(np.float64), None, same_hash)
    mcnemar = stats.mcnemar_from_pairs(verdicts[:, 0], verdicts[:, 1])
    tally = stats.tally(totals[:, 1] - totals[:, 0])

    names_a = _components(session.get(CriteriaDefinition, a.criteria_hash))
    names_b = _components(session.get(CriteriaDefinition, b.criteria_hash))
    components = []
    for name in sorted(names_a & names_b):
        ca, cb = aliased(ScoreComponent), aliased(ScoreComponent)
        # A skipped or failed component has no score: such pairs are left out of that component's n.
        query = (
            _join(side_a, side_b, ca.score, cb.score)
            .join(ca, and_(ca.score_id == side_a.c.score_id, ca.component == name))
            .join(cb, and_(cb.score_id == side_b.c.score_id, cb.component == name))
            .where(_both_usable(side_a, side_b), ca.score.is_not(None), cb.score.is_not(None))
        )
        sigmas = (_sigma(noise_a, name), _sigma(noise_b, name))
        components.append(_shift(name, _arrays(session, query, 2), sigmas, same_hash))

    item_floor = stats.item_floor(*sigma_total, same_hash=same_hash)
    pairs = _join(side_a, side_b, *_pair_columns(side_a, side_b)).where(_both_usable(side_a, side_b))
    moved = session.execute(
        pairs.order_by(func.abs(side_b.c.total - side_a.c.total).desc(), side_a.c.external_id).limit(LIST_LIMIT)
    ).all()
    flipped = session.execute(
        pairs.where(side_a.c.passed != side_b.c.passed).order_by(side_a.c.external_id).limit(LIST_LIMIT)
    ).all()
    return Comparison(
        a=Side(a.id, a.suite_name, a.criteria_hash, a.status, _counts(session, side_a, side_b), _only_ids(session, side_a, side_b), noise_a),
        b=Side(b.id, b.suite_name, b.criteria_hash, b.status, _counts(session, side_b, side_a), _only_ids(session, side_b, side_a), noise_b),
        warnings=warnings,
        matched=counts[0],
        paired=counts[1],
        excluded=counts[0] - counts[1],
        total=total,
        tally=tally,
        pass_rate=pass_rate,
        mcnemar=mcnemar,
        components=components,
        components_only_a=sorted(names_a - names_b),
        components_only_b=sorted(names_b - names_a),
        item_noise_floor=item_floor,
        moved_most=[_pair_row(r, item_floor) for r in moved],
        flipped=[_pair_row(r, item_floor) for r in flipped],
    )


# --- every pair, for the CSV export ---------------------------------------------------------------


def iter_pairs(
    session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID, *, item_floor: float | None, chunk: int = 1000
) -> Iterator[dict[str, Any]]:
    """One row per matched pair (``paired`` or ``excluded``), by external id, then the items of A and of
    B that could not be matched (``only in a``, ``only in b``, ``no external id``, ``repeated external
    id``). Streamed ``chunk`` rows at a time. ``item_floor`` is the per-item noise floor (or None)."""
    with _hash_joins(session):
        side_a, side_b = _side_cte(batch_a, "side_a"), _side_cte(batch_b, "side_b")
        match = case((_both_usable(side_a, side_b), PAIRED), else_=EXCLUDED)
        both = _join(
            side_a, side_b,
            side_a.c.external_id, match.label("match"), side_a.c.item_id.label("a_item_id"), side_b.c.item_id.label("b_item_id"),
            side_a.c.status.label("a_status"), side_b.c.status.label("b_status"),
            side_a.c.total.label("a_total"), side_b.c.total.label("b_total"),
            side_a.c.passed.label("a_passed"), side_b.c.passed.label("b_passed"), _flip(side_a, side_b).label("flip"),
        ).order_by(side_a.c.external_id)
        for row in session.execute(both.execution_options(yield_per=chunk)).mappings():
            out = dict(row)
            usable = row["match"] == PAIRED
            delta = row["b_total"] - row["a_total"] if usable else None
            out["delta"] = delta
            out["flip"] = row["flip"] if usable else None
            out["beyond_noise"] = None if delta is None or item_floor is None else abs(delta) > item_floor
            yield out
        for here, there, only, prefix in ((side_a, side_b, ONLY_A, "a"), (side_b, side_a, ONLY_B, "b")):
            kind = case(
                (here.c.external_id.is_(None), NO_ID), (here.c.copies > 1, REPEATED_ID), else_=literal(only)
            )
            rest = (
                select(here.c.external_id, kind.label("match"), here.c.item_id, here.c.status, here.c.total, here.c.passed)
                .where(~and_(_matchable(here), _has_partner(here, there)))
                .order_by(kind, here.c.external_id, here.c.item_id)
            )
            for row in session.execute(rest.execution_options(yield_per=chunk)):
                yield {
                    "external_id": row.external_id, "match": row.match, f"{prefix}_item_id": row.item_id,
                    f"{prefix}_status": row.status, f"{prefix}_total": row.total, f"{prefix}_passed": row.passed,
                }


def item_floor_for(session: Session, a: Batch, b: Batch) -> float | None:
    """The per-item noise floor between two batches' criteria (None when not measured)."""
    noise_a = latest_noise(session, a.criteria_hash)
    same = a.criteria_hash == b.criteria_hash
    noise_b = noise_a if same else latest_noise(session, b.criteria_hash)
    return stats.item_floor(_sigma(noise_a, TOTAL), _sigma(noise_b, TOTAL), same_hash=same)

