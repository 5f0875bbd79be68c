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
- With ``by`` (``metadata.KEY``, :mod:`assay.scoring.slices`), the paired pairs are also split by the
  metadata value of B's item (the batch under test), and each slice gets its own total and pass-rate
  differences with their intervals, noise floor, wins / ties / losses and McNemar's test.

Reports are cached per pair of batches in this process. The cache key holds each batch's completion
state (status, finish time, finished scores and the latest completion time) and the noise estimates
used, so a batch still running, a retried batch or a new calibration is never served stale.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    Select,
    String,
    Table,
    Uuid,
    and_,
    any_,
    case,
    cast,
    func,
    select,
    text,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, aliased

from assay.scoring import slices as slicing
from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.rescoring.diff import FAIL_TO_PASS, PASS_TO_FAIL
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    TOTAL_COMPONENT,
    Batch,
    CriteriaDefinition,
    Item,
    Score,
    ScoreComponent,
)
from assay.scoring.trust import LIST_LIMIT, stats
from assay.scoring.trust.noise import NoiseFloor, latest_noise

TOTAL = TOTAL_COMPONENT
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
class SliceShift:
    """One slice of the paired pairs: its name and size flag (``describe``) and its statistics."""

    slice: dict[str, Any]
    total: Shift
    tally: stats.Tally
    pass_rate: Shift
    mcnemar: stats.McNemar


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
    by: str | None = None
    slices: list[SliceShift] | None = None  # with ``by`` only


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


def _pick(column: Any, side: Any, postgres: bool) -> Any:
    """The value of ``column`` for the side's score in an external id's group (meaningful when the side
    has exactly one score there). PostgreSQL has no max() over uuid or boolean."""
    if not postgres:
        return func.max(column).filter(side)
    if isinstance(column.type, Boolean):
        return func.bool_or(column).filter(side)
    if isinstance(column.type, Uuid):
        return type_coerce(func.array_agg(column).filter(side), ARRAY(Uuid()))[1]
    return func.max(column).filter(side)


def _pairs_table(name: str) -> Table:
    columns = [Column("external_id", String(255)), Column("na", Integer), Column("nb", Integer)]
    for prefix in ("a", "b"):
        columns += [
            Column(f"{prefix}_score_id", Uuid), Column(f"{prefix}_item_id", Uuid),
            Column(f"{prefix}_state", String(20)), Column(f"{prefix}_status", String(20)),
            Column(f"{prefix}_total", Float), Column(f"{prefix}_passed", Boolean),
        ]
    return Table(name, MetaData(), *columns, prefixes=["TEMPORARY"], postgresql_on_commit="DROP")


@contextmanager
def _grouped(session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID) -> Iterator[Table]:
    """ONE row per external id over both batches' machine scores, materialized for the request.

    Each row holds how many scores each batch has under that external id (``na``, ``nb``) and, for a
    side with one, that score's id, item, state, status, total and verdict. The scores without an
    external id fall in the one row whose ``external_id`` is NULL (counted apart, never matched). The
    grouping is a single hash aggregate over the two batches' scores: linear, whatever the planner's
    estimates; every count, array and list of the report reads this table (a temporary table, dropped
    at the end, and on PostgreSQL at commit too)."""
    postgres = session.get_bind().dialect.name == "postgresql"
    table = _pairs_table(f"compare_pairs_{uuid.uuid4().hex[:16]}")
    sides = {"a": Score.batch_id == batch_a, "b": Score.batch_id == batch_b}
    columns: list[Any] = [Item.external_id, func.count().filter(sides["a"]), func.count().filter(sides["b"])]
    for side in sides.values():
        columns += [
            _pick(Score.id, side, postgres), _pick(Score.item_id, side, postgres),
            func.max(_state()).filter(side), func.max(_status_label()).filter(side),
            func.max(Score.total).filter(side), _pick(Score.passed, side, postgres),
        ]
    grouped = (
        select(*columns)
        .join(Item, Item.id == Score.item_id)
        .where(Score.batch_id.in_((batch_a, batch_b)), machine_scores())
        .group_by(Item.external_id)
    )
    connection = session.connection()
    table.create(connection)
    try:
        session.execute(table.insert().from_select([c.name for c in table.c], grouped))
        if postgres:
            # Fresh rows have no statistics: give the planner the real row counts for what follows.
            session.execute(text(f"ANALYZE {table.name}"))
        yield table
    finally:
        # After an error the transaction may be aborted: its rollback drops the table then.
        with suppress(Exception):
            table.drop(session.connection())


def _keyed(t: Table) -> Any:
    return t.c.external_id.is_not(None)


def _matched(t: Table) -> Any:
    """An external id once in each batch: a matched pair."""
    return and_(_keyed(t), t.c.na == 1, t.c.nb == 1)


def _paired(t: Table) -> Any:
    return and_(_matched(t), t.c.a_state == "usable", t.c.b_state == "usable")


def _only(t: Table, here: str) -> Any:
    """An external id once in this batch and not once in the other."""
    there = "b" if here == "a" else "a"
    return and_(_keyed(t), t.c[f"n{here}"] == 1, t.c[f"n{there}"] != 1)


def _flip(t: Table) -> Any:
    return case(
        (and_(t.c.a_passed.is_(True), t.c.b_passed.is_(False)), PASS_TO_FAIL),
        (and_(t.c.a_passed.is_(False), t.c.b_passed.is_(True)), FAIL_TO_PASS),
        else_=None,
    )


def _state_counts(session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID) -> dict[uuid.UUID, dict[str, int]]:
    """Each batch's machine scores by state (a grouped count over the scores alone)."""
    scores = (
        select(Score.batch_id.label("batch_id"), _state().label("state"))
        .where(Score.batch_id.in_((batch_a, batch_b)), machine_scores())
        .subquery()
    )
    rows = session.execute(
        select(scores.c.batch_id, scores.c.state, func.count()).group_by(scores.c.batch_id, scores.c.state)
    ).all()
    counts: dict[uuid.UUID, dict[str, int]] = {batch_a: {}, batch_b: {}}
    for batch_id, state, n in rows:
        counts[batch_id][state] = n
    return counts


def _counts(t: Table, here: str) -> list[Any]:
    n = t.c[f"n{here}"]
    return [
        func.coalesce(func.sum(n).filter(t.c.external_id.is_(None)), 0),
        func.coalesce(func.sum(n).filter(_keyed(t), n > 1), 0),
        func.count().filter(_only(t, here)),
    ]


def _side_counts(by_state: dict[str, int], unmatchable: Any) -> SideCounts:
    return SideCounts(
        scores=sum(by_state.values()),
        **{state: by_state.get(state, 0) for state in STATES},
        no_external_id=int(unmatchable[0]),
        repeated_external_id=int(unmatchable[1]),
        only_here=int(unmatchable[2]),
    )


def _only_ids(session: Session, t: Table, here: str) -> list[str]:
    rows = select(t.c.external_id).where(_only(t, here)).order_by(t.c.external_id).limit(LIST_LIMIT)
    return list(session.scalars(rows))


def _arrays(session: Session, query: Select[Any], width: int) -> np.ndarray:
    """The rows of ``query`` (all numbers) as one float array, fetched in chunks."""
    # Plain tuples: numpy probing each Row for the array protocols costs more than the fetch.
    parts = [
        np.array([tuple(row) for row in part], dtype=np.float64).reshape(-1, width)
        for part in session.execute(query.execution_options(yield_per=FETCH_CHUNK)).partitions()
    ]
    return np.concatenate(parts) if parts else np.empty((0, width))


def _components(definition: CriteriaDefinition | None) -> set[str]:
    return set(((definition.criteria_content if definition else None) or {}).get("components") or {})


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


def _pair_columns(t: Table) -> list[Any]:
    return [
        t.c.external_id, t.c.a_item_id, t.c.b_item_id, t.c.a_total, t.c.b_total,
        t.c.a_passed, t.c.b_passed, _flip(t).label("flip"),
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


def compare_batches(session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID, by: str | None = None) -> Comparison:
    """The report for batch B against batch A (differences are B − A), per slice of ``by`` too; cached
    per pair, state and ``by``."""
    key_name = slicing.metadata_key(by) if by is not None else None
    a, b = load_batches(session, batch_a, batch_b)
    noise_a = latest_noise(session, a.criteria_hash)
    noise_b = noise_a if b.criteria_hash == a.criteria_hash else latest_noise(session, b.criteria_hash)
    key = (_fingerprint(session, a), _fingerprint(session, b), _noise_key(noise_a), _noise_key(noise_b), by)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    with _grouped(session, a.id, b.id) as grouped:
        result = _compare(session, a, b, noise_a, noise_b, grouped)
        if key_name is not None:
            sigma_total = (_sigma(noise_a, TOTAL), _sigma(noise_b, TOTAL))
            same_hash = a.criteria_hash == b.criteria_hash
            sliced = _slices(session, grouped, key_name, sigma_total, same_hash)
            result = dataclasses.replace(result, by=by, slices=sliced)
    with _cache_lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def _compare(
    session: Session, a: Batch, b: Batch, noise_a: NoiseFloor | None, noise_b: NoiseFloor | None, t: Table
) -> Comparison:
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
    counts = session.execute(
        select(func.count().filter(_matched(t)), func.count().filter(_paired(t)), *_counts(t, "a"), *_counts(t, "b"))
    ).one()
    by_state = _state_counts(session, a.id, b.id)
    # In no order: the statistics do not depend on it (the bootstrap sorts the differences first).
    paired = select(t.c.a_total, t.c.b_total, t.c.a_passed, t.c.b_passed).where(_paired(t))
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
        # Each side's component looked up by its primary key (score id, component).
        query = (
            select(ca.score, cb.score)
            .select_from(t)
            .join(ca, and_(ca.score_id == t.c.a_score_id, ca.component == name))
            .join(cb, and_(cb.score_id == t.c.b_score_id, cb.component == name))
            .where(_paired(t), ca.score.is_not(None), cb.score.is_not(None))
        )
        sigmas = (_sigma(noise_a, name), _sigma(noise_b, name))
        components.append(_shift(name, _arrays(session, query, 2), sigmas, same_hash))

    item_floor = stats.item_floor(*sigma_total, same_hash=same_hash)
    pairs = select(*_pair_columns(t)).where(_paired(t))
    moved = session.execute(
        pairs.order_by(func.abs(t.c.b_total - t.c.a_total).desc(), t.c.external_id).limit(LIST_LIMIT)
    ).all()
    flipped = session.execute(
        pairs.where(t.c.a_passed != t.c.b_passed).order_by(t.c.external_id).limit(LIST_LIMIT)
    ).all()
    return Comparison(
        a=Side(a.id, a.suite_name, a.criteria_hash, a.status, _side_counts(by_state[a.id], counts[2:5]), _only_ids(session, t, "a"), noise_a),
        b=Side(b.id, b.suite_name, b.criteria_hash, b.status, _side_counts(by_state[b.id], counts[5:8]), _only_ids(session, t, "b"), noise_b),
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


def _slices(
    session: Session, t: Table, key: str, sigma_total: tuple[float | None, float | None], same_hash: bool
) -> list[SliceShift]:
    """The paired pairs split by the metadata value of B's item, each slice with its own statistics."""
    rows = session.execute(
        select(slicing.value_json(key), t.c.a_total, t.c.b_total, t.c.a_passed, t.c.b_passed)
        .select_from(t)
        .join(Item, Item.id == t.c.b_item_id)
        .where(_paired(t))
    ).all()
    labelled = [(slicing.label_of_json(row[0], key), row[1:]) for row in rows]
    out = []
    for found in slicing.group(labelled, lambda row: row[0]):
        values = np.array([numbers for _, numbers in found.rows], dtype=np.float64).reshape(-1, 4)
        totals, verdicts = values[:, :2], values[:, 2:].astype(bool)
        out.append(
            SliceShift(
                slice=found.describe(len(values)),
                total=_shift("total", totals, sigma_total, same_hash),
                tally=stats.tally(totals[:, 1] - totals[:, 0]),
                pass_rate=_shift("pass_rate", verdicts.astype(np.float64), None, same_hash),
                mcnemar=stats.mcnemar_from_pairs(verdicts[:, 0], verdicts[:, 1]),
            )
        )
    return out


# --- every pair, for the CSV export ---------------------------------------------------------------


def iter_pairs(
    session: Session, batch_a: uuid.UUID, batch_b: uuid.UUID, *, item_floor: float | None, chunk: int = 1000
) -> Iterator[dict[str, Any]]:
    """One row per matched pair (``paired`` or ``excluded``), by external id, then the items of A and of
    B that could not be matched (``only in a``, ``only in b``, ``no external id``, ``repeated external
    id``). Streamed ``chunk`` rows at a time. ``item_floor`` is the per-item noise floor (or None)."""
    with _grouped(session, batch_a, batch_b) as t:
        match = case((_paired(t), PAIRED), else_=EXCLUDED)
        both = (
            select(
                t.c.external_id, match.label("match"), t.c.a_item_id, t.c.b_item_id, t.c.a_status, t.c.b_status,
                t.c.a_total, t.c.b_total, t.c.a_passed, t.c.b_passed, _flip(t).label("flip"),
            )
            .where(_matched(t))
            .order_by(t.c.external_id)
        )
        for row in session.execute(both.execution_options(yield_per=chunk)).mappings():
            out = dict(row)
            usable = row["match"] == PAIRED
            delta = row["b_total"] - row["a_total"] if usable else None
            out["delta"] = delta
            out["flip"] = row["flip"] if usable else None
            out["beyond_noise"] = None if delta is None or item_floor is None else abs(delta) > item_floor
            yield out
        for here, batch_id, only in (("a", batch_a, ONLY_A), ("b", batch_b, ONLY_B)):
            # By kind ("no external id" < "only in …" < "repeated external id"), external id, item.
            scores = (
                select(Item.external_id, Score.item_id, _status_label(), Score.total, Score.passed)
                .join(Item, Item.id == Score.item_id)
                .where(Score.batch_id == batch_id, machine_scores())
            )
            no_id = scores.where(Item.external_id.is_(None)).order_by(Score.item_id)
            only_here = (
                select(t.c.external_id, t.c[f"{here}_item_id"], t.c[f"{here}_status"], t.c[f"{here}_total"], t.c[f"{here}_passed"])
                .where(_only(t, here))
                .order_by(t.c.external_id)
            )
            repeated = _repeated(session, t, here, scores)
            for kind, query in ((NO_ID, no_id), (only, only_here), (REPEATED_ID, repeated)):
                if query is None:
                    continue
                for row in session.execute(query.execution_options(yield_per=chunk)):
                    yield {
                        "external_id": row[0], "match": kind, f"{here}_item_id": row[1],
                        f"{here}_status": row[2], f"{here}_total": row[3], f"{here}_passed": row[4],
                    }


def _repeated(session: Session, t: Table, here: str, scores: Select[Any]) -> Select[Any] | None:
    """The side's scores whose external id repeats inside the batch (None when there are none).

    On PostgreSQL the ids are passed as one array (``= ANY``, hashed): joining the grouped table to
    freshly written scores, which the planner expects to be a row or two, gives a nested loop over the
    table (quadratic). SQLite reads the ``IN`` subquery through an automatic index."""
    repeated_ids = select(t.c.external_id).where(_keyed(t), t.c[f"n{here}"] > 1)
    if session.get_bind().dialect.name != "postgresql":
        return scores.where(Item.external_id.in_(repeated_ids)).order_by(Item.external_id, Score.item_id)
    ids = list(session.scalars(repeated_ids))
    if not ids:
        return None
    return scores.where(Item.external_id == any_(cast(ids, ARRAY(String)))).order_by(Item.external_id, Score.item_id)


def item_floor_for(session: Session, a: Batch, b: Batch) -> float | None:
    """The per-item noise floor between two batches' criteria (None when not measured)."""
    noise_a = latest_noise(session, a.criteria_hash)
    same = a.criteria_hash == b.criteria_hash
    noise_b = noise_a if same else latest_noise(session, b.criteria_hash)
    return stats.item_floor(_sigma(noise_a, TOTAL), _sigma(noise_b, TOTAL), same_hash=same)

