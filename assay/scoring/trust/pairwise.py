"""Pairwise runs: two or more batches compared item by item under a suite's pairwise rubric.

A run is a batch of the built-in ``pairwise`` kind (``kinds.pairwise``): each item is one pair of
outputs, (A, B), of two compared batches for the same external id, and its two judge components are
the two orders (``a_first``: A's output in the ``{{output_a}}`` slot; ``b_first``: the prompt with the
outputs swapped). So leases, budgets, the batch lane, progress, cancel, resume and carry-over are the
pipeline's own. Each component scores B's share of the pair (1 B better, ½ tie, 0 A better); the
report (``trust.pairwise_report``) combines the two orders (``trust.ranking.pair_outcome``).

**Criteria.** :func:`pairwise_criteria` resolves the suite's ``pairwise:`` section (an operational
option, see ``suites.pairwise``) into criteria of kind ``pairwise`` with their own hash, stored with
the run and its batch. The pairwise batch's scores carry the suite name ``<suite>:pairwise``
(:func:`run_suite_name`), never the suite's: the nightly re-score, which takes the items that have a
score under a suite, never sees a pair, and editing the pairwise rubric never makes the suite stale.

**Pairs.** Items are matched by external id as ``compare`` matches them: each batch's own machine
scores; items without an external id, and ids repeated inside a batch, are left out and counted. With
up to ``ALL_PAIRS_MAX_SYSTEMS`` systems every pair of systems is judged on every shared item. With more
(up to ``MAX_SYSTEMS``) each item gets a *cycle*: its systems in an order drawn from the SHA-256 of the
external id, each judged against the next and the last against the first; every item's comparisons
then connect all its systems (k pairs an item instead of k(k-1)/2), and over many items every pair of
systems meets about equally often. At most ``MAX_PAIRS`` pairs a run (invariant 11).

**Carry-over.** A pair is one stored item per (A item, B item) (its external id is the two item ids),
reused by every run that compares them, so a run whose pairwise criteria are unchanged copies what an
earlier run judged (``pipeline.planning`` carries over for a batch with the ``pairwise`` marker).
Pair items have no origin batch: deleting a run's batch removes its scores, not pairs a later run
judged.

Services flush; callers commit (a dry run rolls back) and then start the batch's planner.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError, Conflict, InvalidInput, NotFound
from assay.scoring.intake import batches
from assay.scoring.intake.ingest import item_content_hash
from assay.scoring.judge.rubrics import compose_template, rubric_verdict
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.pairwise import A_FIRST, B_FIRST, KIND_NAME, PairItem
from assay.scoring.pipeline.components import pending_score
from assay.scoring.pipeline.hooks import on_batch_completed
from assay.scoring.rescoring.rescore import Estimate, Lane, estimate
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import Batch, Item, PairwiseRun, Score, SuiteRecord, utcnow
from assay.scoring.suites.criteria import current_suite, register_criteria
from assay.scoring.suites.loader import ComponentSpec, Criteria, ModelCatalog, RubricJudge, canonical_json
from assay.scoring.suites.pairwise import full_rubric, order_verdict, parse_section, swapped
from assay.scoring.trust.pairwise_report import SLICE_PREFIX, compute_report
from assay.scoring.trust.runs import batch_fields, run_batch, run_of_batch, start_run_batch

MARKER = "pairwise"
ALL_PAIRS_MAX_SYSTEMS = 6
MAX_SYSTEMS = 20
MAX_PAIRS = 50_000
SUFFIX = ":pairwise"
_INSERT_CHUNK = 1000


def run_suite_name(suite: str) -> str:
    """The suite name a run's scores carry: never a suite's (a suite name has no ':')."""
    return suite[: 100 - len(SUFFIX)] + SUFFIX


def pairwise_criteria(record: SuiteRecord, catalog: ModelCatalog) -> Criteria:
    """The suite's ``pairwise:`` section resolved into criteria of the two orders (own hash)."""
    raw = (record.options or {}).get("pairwise")
    if raw is None:
        raise InvalidInput(
            f"suite {record.name!r} has no pairwise: section; add one with the rubric that compares two outputs"
        )
    section = parse_section(raw)
    model = catalog.resolve(section.provider, section.model)
    catalog.check_parameters(section.provider, model, section.parameters)
    rubric = full_rubric(section)

    def order(b_first: bool) -> ComponentSpec:
        prompt = swapped(section.prompt) if b_first else section.prompt
        verdict = order_verdict(b_first)
        judge = RubricJudge(
            **section.parameters,
            provider=section.provider,
            model=model,
            max_tokens=section.max_tokens,
            rubric=rubric,
            prompt=prompt,
            verdict=verdict,
            template=compose_template(rubric, prompt, verdict),
            verdict_schema=rubric_verdict(verdict).model.model_json_schema(),
        )
        return ComponentSpec(weight=0.5, judge=judge)

    return Criteria(kind=KIND_NAME, threshold=0.5, components={A_FIRST: order(False), B_FIRST: order(True)})


# --- planning the pairs ---------------------------------------------------------------------------------


def system_pairs(systems: list[int], item_key: str) -> list[tuple[int, int]]:
    """Which of ``systems`` (indexes, ascending) are compared on one item: every pair, or a cycle in
    an order drawn from the item's key (see the module docstring). Each pair is (lower, higher)."""
    if len(systems) <= ALL_PAIRS_MAX_SYSTEMS:
        return list(itertools.combinations(systems, 2))
    order = list(systems)
    random.Random(hashlib.sha256(item_key.encode()).digest()).shuffle(order)
    cycle = {tuple(sorted((order[n], order[(n + 1) % len(order)]))) for n in range(len(order))}
    return sorted(cycle)  # type: ignore[arg-type]


@dataclass
class SideItems:
    """One compared batch's items by external id, and what was left out."""

    by_external_id: dict[str, tuple[uuid.UUID, str, dict[str, Any]]] = field(default_factory=dict)
    without_external_id: int = 0
    repeated: int = 0


def side_items(session: Session, batch_id: uuid.UUID) -> SideItems:
    rows = session.execute(
        select(Item.id, Item.external_id, Item.kind, Item.payload)
        .join(Score, Score.item_id == Item.id)
        .where(Score.batch_id == batch_id, machine_scores())
    ).all()
    counts = Counter(r.external_id for r in rows if r.external_id is not None)
    side = SideItems()
    for r in rows:
        if r.external_id is None:
            side.without_external_id += 1
        elif counts[r.external_id] > 1:
            side.repeated += 1
        else:
            side.by_external_id[r.external_id] = (r.id, r.kind, r.payload)
    return side


def _judged_view(kind_name: str, payload: dict[str, Any]) -> tuple[dict[str, str], str]:
    """(the item's placeholder values without its output, its output) as the judge would read them."""
    kind = get_kind(kind_name)
    inputs = dict(kind.judge_inputs(kind.item_model.model_validate(payload)))
    if "output" not in inputs:
        raise InvalidInput(f"items of kind {kind_name!r} have no {{{{output}}}} to compare")
    return inputs, inputs.pop("output")


@dataclass
class Plan:
    suite: str
    criteria_hash: str
    criteria: Criteria
    systems: list[dict[str, Any]]
    design: dict[str, Any]
    pairs: list[dict[str, Any]]  # the pair items' payloads
    notes: list[str]


def plan(
    session: Session,
    suite: str,
    batch_ids: list[uuid.UUID],
    catalog: ModelCatalog,
    *,
    labels: list[str] | None = None,
    by: str | None = None,
    lane: Lane = "realtime",
) -> Plan:
    """What a run would judge (nothing written but the pairwise criteria, stored once per hash)."""
    if not 2 <= len(batch_ids) <= MAX_SYSTEMS:
        raise InvalidInput(f"compare 2 to {MAX_SYSTEMS} batches, got {len(batch_ids)}")
    if len(set(batch_ids)) != len(batch_ids):
        raise InvalidInput("a batch is named twice; compare distinct batches")
    if labels is not None and (len(labels) != len(batch_ids) or len(set(labels)) != len(labels)):
        raise InvalidInput(f"give one distinct label per batch ({len(batch_ids)}), got {labels}")
    if by is not None and (not by.startswith(SLICE_PREFIX) or len(by) == len(SLICE_PREFIX)):
        raise InvalidInput(f"by: slice by metadata.KEY, got {by!r}")
    record = current_suite(session, suite)
    criteria = pairwise_criteria(record, catalog)
    if lane == "batch":
        catalog.check_batch_lane(criteria)
    criteria_hash = register_criteria(session, criteria)
    sides = []
    for batch_id in batch_ids:
        if session.get(Batch, batch_id) is None:
            raise NotFound(f"no batch {batch_id}")
        sides.append(side_items(session, batch_id))
    names = labels or [str(b) for b in batch_ids]
    systems = [{"batch_id": str(b), "label": name} for b, name in zip(batch_ids, names)]
    notes = [
        f"{name}: {side.without_external_id} item(s) without an external id and {side.repeated} with an id "
        "repeated in the batch left out"
        for name, side in zip(names, sides)
        if side.without_external_id or side.repeated
    ]
    external_ids = sorted(set().union(*(side.by_external_id for side in sides)))
    views: dict[tuple[int, str], tuple[dict[str, str], str]] = {}
    pairs: list[dict[str, Any]] = []
    unusable = 0
    for ext in external_ids:
        present = [i for i, side in enumerate(sides) if ext in side.by_external_id]
        for i, j in system_pairs(present, ext):
            try:
                for s in (i, j):
                    if (s, ext) not in views:
                        _, kind_name, payload = sides[s].by_external_id[ext]
                        views[(s, ext)] = _judged_view(kind_name, payload)
            except (ValidationError, AssayError):
                unusable += 1
                continue
            (a_id, _, a_payload), (b_id, _, _) = sides[i].by_external_id[ext], sides[j].by_external_id[ext]
            metadata = a_payload.get("metadata")
            pairs.append(
                PairItem(
                    id=ext,
                    a={"batch_id": batch_ids[i], "item_id": a_id},
                    b={"batch_id": batch_ids[j], "item_id": b_id},
                    inputs=views[(i, ext)][0],
                    output_a=views[(i, ext)][1],
                    output_b=views[(j, ext)][1],
                    metadata=metadata if isinstance(metadata, dict) else None,
                ).model_dump(mode="json", exclude_none=True)
            )
            if len(pairs) > MAX_PAIRS:
                raise InvalidInput(f"more than {MAX_PAIRS} pairs; compare fewer batches or smaller ones")
    if unusable:
        notes.append(f"{unusable} pair(s) left out: an item's output could not be read for the judge")
    if not pairs:
        raise InvalidInput("the batches share no external id: there is nothing to compare")
    design = {
        "rule": "all pairs" if len(batch_ids) <= ALL_PAIRS_MAX_SYSTEMS else "cycle per item",
        "all_pairs_max_systems": ALL_PAIRS_MAX_SYSTEMS,
        "items": len(external_ids),
        "pairs": len(pairs),
        "by": by,
    }
    return Plan(record.name, criteria_hash, criteria, systems, design, pairs, notes)


# --- starting a run ----------------------------------------------------------------------------------


def _pair_key(pair: dict[str, Any]) -> str:
    return f"{pair['a']['item_id']}|{pair['b']['item_id']}"


def _pair_item_ids(session: Session, pairs: list[dict[str, Any]]) -> list[uuid.UUID]:
    """The stored item of each pair, created when no run stored it before (same order as ``pairs``)."""
    keys = [_pair_key(p) for p in pairs]
    found: dict[str, uuid.UUID] = {}
    for start in range(0, len(keys), _INSERT_CHUNK):
        chunk = keys[start : start + _INSERT_CHUNK]
        rows = session.execute(select(Item.external_id, Item.id).where(Item.kind == KIND_NAME, Item.external_id.in_(chunk)))
        found.update({key: item_id for key, item_id in rows})
    now = utcnow()
    new = []
    for key, pair in zip(keys, pairs):
        if key not in found:
            found[key] = uuid.uuid4()
            text = canonical_json(pair)
            new.append(dict(id=found[key], kind=KIND_NAME, external_id=key, payload=pair, content_hash=item_content_hash(text), created_at=now))
    for start in range(0, len(new), _INSERT_CHUNK):
        session.execute(dialect_insert(session)(Item), new[start : start + _INSERT_CHUNK])
    return [found[k] for k in keys]


class DryRun(Exception):
    """Raised inside the transaction of a dry run, so that everything it wrote is rolled back; carries
    what the caller answers."""

    def __init__(self, result: Any) -> None:
        super().__init__("dry run")
        self.result = result


def start(
    session: Session,
    the_plan: Plan,
    catalog: ModelCatalog,
    *,
    created_by: str,
    lane: Lane = "realtime",
    budget_usd: float | None = None,
) -> tuple[PairwiseRun, Estimate]:
    """The run, its batch and one pending score per pair; and the estimate of what it will spend (pairs
    judged before under the same criteria carry over). The caller commits, or rolls back a dry run."""
    if budget_usd is not None and budget_usd <= 0:
        raise InvalidInput("budget_usd must be positive")
    now = utcnow()
    run = PairwiseRun(
        id=uuid.uuid4(),
        suite_name=the_plan.suite,
        criteria_hash=the_plan.criteria_hash,
        systems=the_plan.systems,
        design=the_plan.design,
        status="running",
        created_by=created_by[:255],
        created_at=now,
    )
    batch = start_run_batch(session, run, MARKER, suite_name=run_suite_name(the_plan.suite), lane=lane, budget_usd=budget_usd)
    item_ids = _pair_item_ids(session, the_plan.pairs)
    rows = [
        pending_score(
            item_id=item_id,
            suite=batch.suite_name,
            criteria_hash=the_plan.criteria_hash,
            criteria=the_plan.criteria,
            triggered_by=created_by,
            created_at=now,
            batch_id=batch.id,
            position=position,
        )
        for position, item_id in enumerate(item_ids)
    ]
    for begin in range(0, len(rows), _INSERT_CHUNK):
        # A pair another run is judging right now (one active score per item and hash) is left to it.
        session.execute(dialect_insert(session)(Score).on_conflict_do_nothing(), rows[begin : begin + _INSERT_CHUNK])
    batch.total_items = session.scalar(select(func.count()).select_from(Score).where(Score.batch_id == batch.id)) or 0
    session.flush()
    spend = estimate(
        session,
        the_plan.criteria_hash,
        batch.suite_name,
        Item.id.in_(select(Score.item_id).where(Score.batch_id == batch.id)),
        catalog,
        lane,
    )
    if batch.total_items < len(rows):
        spend.notes.append(f"{len(rows) - batch.total_items} pair(s) left out: another run is judging them now")
    return run, spend


# --- when the batch finishes; cancel and resume ---------------------------------------------------------------


@on_batch_completed
def batch_completed(session: Session, batch: Batch) -> None:
    """A batch completed: if it carries a pairwise run, store the run's report."""
    if MARKER in (batch.summary or {}):
        finish_run(session, batch)


def finish_run(session: Session, batch: Batch) -> None:
    """Store the run's report afresh (a resumed run finishes again). A budget cut reports the pairs
    judged; a cancelled batch ends the run without a report."""
    found = run_of_batch(session, batch, MARKER, PairwiseRun)
    if found is None:
        return
    run, status = found
    run.report = compute_report(session, run) if status == "completed" else None
    run.status = status
    run.completed_at = utcnow()
    session.flush()


def _live_batch(session: Session, run: PairwiseRun) -> Batch:
    batch = run_batch(session, run)
    if batch is None:
        raise Conflict(f"pairwise run {run.id}'s batch was deleted: start a new run")
    return batch


def cancel_run(session: Session, run: PairwiseRun) -> None:
    """Cancel the run's batch (queued pairs dropped, judged ones kept): the run ends without a report."""
    batch = _live_batch(session, run)
    batches.cancel(session, batch)
    finish_run(session, batch)


def resume_run(session: Session, run: PairwiseRun, budget_usd: float | None) -> batches.Resumed:
    """Resume a run whose batch the budget stopped, under a new budget (None: none): the stopped pairs
    go back to work, what was judged is kept; the report is made again when the batch finishes. The
    caller publishes the returned work (and starts the planner when it says so)."""
    resumed = batches.resume(session, _live_batch(session, run), budget_usd)
    run.status = "running"
    run.report = None
    run.completed_at = None
    session.flush()
    return resumed


# --- reading ------------------------------------------------------------------------------------------------


def get_run(session: Session, run_id: uuid.UUID) -> PairwiseRun:
    run = session.get(PairwiseRun, run_id)
    if run is None:
        raise NotFound(f"no pairwise run {run_id}")
    return run


def run_view(session: Session, run: PairwiseRun) -> dict[str, Any]:
    fields = batch_fields(session, run)
    return {
        "id": str(run.id),
        "suite": run.suite_name,
        "criteria_hash": run.criteria_hash,
        "systems": run.systems,
        "design": run.design,
        **fields,
        "report": shown_report(run, fields["status"]),
    }


def shown_report(run: PairwiseRun, status: str) -> dict[str, Any] | None:
    """The stored report, but none while the run runs (again, after a resume: that report was the cut's)."""
    return None if status == "running" else run.report


def list_runs(session: Session, suite: str | None = None, limit: int = 50) -> list[PairwiseRun]:
    query = select(PairwiseRun).order_by(PairwiseRun.created_at.desc()).limit(limit)
    if suite is not None:
        query = query.where(PairwiseRun.suite_name == suite)
    return list(session.scalars(query))
