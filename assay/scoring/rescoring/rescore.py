"""Re-scoring stored items under a suite's current criteria: what is stale, what it would cost, and the
batch that does it, built in waves. Services flush; callers commit and start the batch's planner.

An item *belongs* to a suite when it has ever had a score under it (or, for an item of the suite's kind
that was stored without any score, such as a session fetched from the history service, when it has
none at all). It is *stale* when it belongs to the suite, has a completed score under it, and has no
score under the current criteria hash (pending, in progress, completed or failed: a failed one is
retried through its batch's retry-failed, never silently every night). *Never scored*: it belongs to
the suite and has no completed score at all. *Partial*: its only completed scores under the current
hash had their judge skipped (no API key then). Old score rows are kept as history.

A re-score pays only for what changed: a component whose fingerprint (its own specification, the kind
and the field mapping) is the same as in the item's latest finished score of the suite, where it
landed ok (or, for a metric, skipped), is copied onto the new score at planning, marked
``carried_over_from``, at no cost (``pipeline.planning.create_components``); the estimate does not count its
judge call.

Idempotent by construction: a second run (or a run killed halfway and run again) finds the items the
first one covered already holding a score under the current hash and skips them; the insert also
skips any item another run raced it to (the one-active-score index).
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import and_, exists, func, literal, or_, select, text
from sqlalchemy.orm import Session, aliased

from assay.scoring.errors import AssayError, BadRequest, Conflict
from assay.scoring.intake.batches import planning_batch
from assay.scoring.kinds import get_kind
from assay.scoring.pipeline.carry_over import latest_finished_score
from assay.scoring.pipeline.components import pending_score
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.online_models import OnlineScore
from assay.scoring.store.models import (
    Batch,
    Item,
    Score,
    ScoreComponent,
    SuiteRecord,
    utcnow,
)
from assay.scoring.suites.criteria import current_suite, load_criteria
from assay.scoring.suites.loader import Criteria, ModelCatalog
from assay.scoring.suites.providers import completion_limit

Lane = Literal["realtime", "batch"]
# Scores under the current hash that mean "this item needs nothing from a re-scoring run".
_COVERING_STATUSES = ("pending", "in_progress", "completed", "failed", "timed_out")
ESTIMATE_SAMPLE = 200


@dataclass(frozen=True)
class Selection:
    """Which items a run takes: stale ones always; never-scored ones unless ``stale_only``; partial ones
    (judge skipped for lack of a key) only when asked."""

    stale_only: bool = False
    partial: bool = False
    # The nightly run: online items (scored from traces) only where their rule says ``rescore: true``.
    nightly: bool = False

    def describe(self) -> str:
        parts = ["stale"] if self.stale_only else ["stale", "never scored"]
        return " + ".join(parts + (["partial"] if self.partial else []))


def candidates(record: SuiteRecord, selection: Selection):  # type: ignore[no-untyped-def]
    """The items a run would re-score, as a WHERE clause over ``Item``."""
    current = record.current_criteria_hash
    mine = aliased(Score)
    any_score = aliased(Score)
    covering = aliased(Score)
    full = aliased(Score)
    partial = aliased(Score)
    # Calibration repeats say nothing about an item's machine verdict: only machine scores count here.
    of_suite = exists().where(mine.item_id == Item.id, mine.suite_name == record.name, machine_scores(mine))
    completed_in_suite = exists().where(
        mine.item_id == Item.id, mine.suite_name == record.name, mine.status == "completed", machine_scores(mine)
    )
    unclaimed_of_kind = and_(
        Item.kind == record.kind, ~exists().where(any_score.item_id == Item.id, machine_scores(any_score))
    )
    covered = exists().where(
        covering.item_id == Item.id,
        covering.criteria_hash == current,
        covering.status.in_(_COVERING_STATUSES),
        machine_scores(covering),
    )
    wanted = [and_(completed_in_suite, ~covered)]
    if not selection.stale_only:
        wanted.append(and_(or_(of_suite, unclaimed_of_kind), ~covered))
    if selection.partial:
        wanted.append(
            and_(
                exists().where(
                    partial.item_id == Item.id,
                    partial.criteria_hash == current,
                    partial.status == "completed",
                    partial.partial.is_(True),
                    machine_scores(partial),
                ),
                ~exists().where(
                    full.item_id == Item.id,
                    full.criteria_hash == current,
                    or_(full.status.in_(("pending", "in_progress")), and_(full.status == "completed", full.partial.is_(False))),
                    machine_scores(full),
                ),
            )
        )
    clause = or_(*wanted)
    if selection.nightly:
        clause = and_(clause, _online_items_taken(record))
    kind = get_kind(record.kind)
    if kind.rescore_filter is not None:
        clause = and_(clause, kind.rescore_filter())
    return clause


def _online_items_taken(record: SuiteRecord):  # type: ignore[no-untyped-def]
    """Items that are not online ones, or whose online rule in this suite asks to be re-scored nightly."""
    rescored = [rule["name"] for rule in ((record.options or {}).get("online") or {}).get("rules", []) if rule.get("rescore")]
    online = exists().where(OnlineScore.item_id == Item.id)
    if not rescored:
        return ~online
    return or_(~online, exists().where(OnlineScore.item_id == Item.id, OnlineScore.rule.in_(rescored)))


# --- the estimate -----------------------------------------------------------------------------------------


@dataclass
class ProviderEstimate:
    """The part of an estimate one judge provider is paid for (at its own prices)."""

    judge_calls: int = 0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cost_usd: float = 0.0

    def times(self, repeats: int) -> ProviderEstimate:
        return ProviderEstimate(
            self.judge_calls * repeats, self.input_tokens * repeats, self.output_tokens * repeats, self.cost_usd * repeats
        )


@dataclass
class Estimate:
    items: int
    judge_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    lane: Lane
    # How output tokens were estimated: "history" (this suite's past judgments), "max_tokens" (a bound),
    # both joined by " + " when judge components differ, or "none" (no call to make).
    output_basis: str
    notes: list[str] = field(default_factory=list)
    # Judge calls a re-score will not make: the component's result carries over unchanged.
    carried_over: int = 0
    by_provider: dict[str, ProviderEstimate] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "judge_calls": self.judge_calls,
            "carried_over": self.carried_over,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "lane": self.lane,
            "output_basis": self.output_basis,
            "notes": self.notes,
            "by_provider": [
                {
                    "provider": name,
                    "judge_calls": part.judge_calls,
                    "input_tokens": round(part.input_tokens),
                    "output_tokens": round(part.output_tokens),
                    "cost_usd": round(part.cost_usd, 6),
                }
                for name, part in sorted(self.by_provider.items())
            ],
        }


def estimate(
    session: Session,
    criteria_hash: str,
    suite: str,
    items_where: Any,
    catalog: ModelCatalog,
    lane: Lane,
    *,
    carry_judges: bool = True,
) -> Estimate:
    """Items, judge calls, tokens and dollars scoring the items matching ``items_where`` under a
    criteria would spend: one call per judge component and item, less the components a re-score
    carries over unchanged (counted exactly, from each item's latest finished score); prompt tokens
    measured per judge component on a sample of the items (rendered exactly as the judge would send
    them), output tokens from the component's past judgments in the suite (or its max_tokens when it
    has none), priced from the model catalog. ``carry_judges=False`` (a calibration): no judge call
    carries over."""
    criteria = load_criteria(session, criteria_hash)
    if lane == "batch":
        catalog.check_batch_lane(criteria)  # before any run is made: refused, never left waiting
    items = session.scalar(select(func.count()).select_from(Item).where(items_where)) or 0
    judges = criteria.judge_calls  # a jury's members, each one call per item
    if not judges or items == 0:
        return Estimate(items, 0, 0, 0, 0.0, lane, "none")
    carried = carried_judge_calls(session, criteria, suite, items_where) if carry_judges else {}
    kind = get_kind(criteria.kind)
    payloads = session.scalars(select(Item.payload).where(items_where).order_by(Item.id).limit(ESTIMATE_SAMPLE)).all()
    sampled = [kind.item_model.model_validate(payload) for payload in payloads]
    calls = input_tokens = output_tokens = 0.0
    cost = 0.0
    bases: list[str] = []
    by_provider: dict[str, ProviderEstimate] = {}
    notes = [f"prompt tokens measured on {len(sampled)} sampled item(s) at ~4 characters per token"]
    for name in judges:
        left = items - carried.get(name, 0)
        if left <= 0:
            continue
        judge = criteria.judge_for(name)
        price = catalog.price(judge.provider, judge.model)
        system_tokens, user_tokens, unusable = _sample_prompt_tokens(criteria, name, kind, sampled, catalog)
        if unusable:
            notes.append(f"{name}: {unusable} sampled item(s) cannot be judged as stored (they will fail, not spend)")
        output, basis = _typical_output_tokens(session, suite, name, completion_limit(judge.max_tokens, judge.parameters))
        cacheable = system_tokens >= price.min_cacheable_tokens
        per_call = (
            user_tokens * price.input_per_mtok
            + system_tokens * (price.cache_read_per_mtok if cacheable else price.input_per_mtok)
            + output * price.output_per_mtok
        ) / 1_000_000
        if cacheable:
            notes.append(
                f"{name}: the static prompt prefix is priced as a cache read (the first call of each cache "
                "window pays to write it)"
            )
        spent = left * per_call * (price.batch_discount if lane == "batch" else 1.0)
        calls += left
        input_tokens += left * (system_tokens + user_tokens)
        output_tokens += left * output
        cost += spent
        bases.append(basis)
        part = by_provider.setdefault(judge.provider, ProviderEstimate())
        part.judge_calls += left
        part.input_tokens += left * (system_tokens + user_tokens)
        part.output_tokens += left * output
        part.cost_usd += spent
    total_carried = sum(carried.values())
    if total_carried:
        notes.append(
            f"{total_carried} judge call(s) carried over: their component and item are unchanged since the "
            "item's last score, so its result is copied at no cost"
        )
    return Estimate(
        items,
        int(calls),
        round(input_tokens),
        round(output_tokens),
        cost,
        lane,
        " + ".join(dict.fromkeys(bases)) or "none",
        notes,
        total_carried,
        by_provider,
    )


def carried_judge_calls(session: Session, criteria: Criteria, suite: str, items_where: Any) -> dict[str, int]:
    """Per judge component, how many of the items a re-score would carry over instead of judging:
    the item's latest finished score of the suite has the component landed ok under the same
    component fingerprint (the rule of ``pipeline.carry_over.carried_results``)."""
    judges = criteria.judge_calls
    rows = session.execute(
        select(Score.criteria_hash, ScoreComponent.component, func.count())
        .select_from(Item)
        .join(Score, Score.id == latest_finished_score(Item.id, literal(suite)))
        .join(ScoreComponent, ScoreComponent.score_id == Score.id)
        .where(items_where, ScoreComponent.component.in_(judges), ScoreComponent.status == "ok")
        .group_by(Score.criteria_hash, ScoreComponent.component)
    ).all()
    carried: dict[str, int] = {}
    for old_hash, name, count in rows:
        try:
            old = load_criteria(session, old_hash)
        except (AssayError, ValidationError):
            continue  # criteria this code can no longer read carry nothing over
        if name in old.rows and old.component_fingerprint(name) == criteria.component_fingerprint(name):
            carried[name] = carried.get(name, 0) + count
    return carried


def _sample_prompt_tokens(
    criteria: Criteria, component: str, kind: Any, sampled: list[Any], catalog: ModelCatalog
) -> tuple[float, float, int]:
    """Mean system and user prompt tokens of one judge component over the sampled items, and how many
    of them cannot be judged."""
    from assay.scoring.judge.governor import estimate_tokens
    from assay.scoring.pipeline.scorer import render_judge_prompt

    systems: list[int] = []
    users: list[int] = []
    unusable = 0
    for item in sampled:
        try:
            prompt, _ = render_judge_prompt(criteria, component, kind, item, catalog)
        except (AssayError, ValueError):
            unusable += 1
            continue
        systems.append(estimate_tokens(prompt.system) if prompt.system else 0)
        users.append(estimate_tokens(prompt.user))
    if not users:
        return 0.0, 0.0, unusable
    return statistics.fmean(systems), statistics.fmean(users), unusable


def _typical_output_tokens(session: Session, suite: str, component: str, max_tokens: int) -> tuple[float, str]:
    usages = session.scalars(
        select(ScoreComponent.usage)
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(
            Score.suite_name == suite,
            ScoreComponent.component == component,
            ScoreComponent.status == "ok",
            ScoreComponent.carried_over_from.is_(None),  # a copy made no call
        )
        .order_by(ScoreComponent.landed_at.desc())
        .limit(1000)
    ).all()
    outputs = [u["output_tokens"] for u in usages if u and u.get("output_tokens")]
    if outputs:
        return statistics.fmean(outputs), "history"
    return float(max_tokens), "max_tokens"


# --- the run ----------------------------------------------------------------------------------------------


def begin_run(
    session: Session,
    suite: str,
    selection: Selection,
    *,
    triggered_by: str,
    lane: Lane,
    budget_usd: float | None,
    scheduled: bool,
) -> Batch:
    """The batch a run fills wave by wave (``add_wave``); its planner starts once the last wave is in.

    ``planner_seen_at`` is refreshed by every wave, so the reconciler plans the batch only if the run
    died (then it plans what the run got to; the next run covers the rest)."""
    record = current_suite(session, suite)  # 409 while the suite is disabled
    if budget_usd is not None and budget_usd <= 0:
        raise BadRequest("budget_usd must be positive")
    return planning_batch(
        session,
        suite_name=record.name,
        criteria_hash=record.current_criteria_hash,
        created_by=triggered_by,
        lane=lane,
        budget_usd=budget_usd,
        summary={"rescore": {"selection": selection.describe(), "scheduled": scheduled}},
    )


def start_rescore(
    session: Session,
    suite: str,
    selection: Selection,
    *,
    dry_run: bool,
    lane: Lane,
    budget_usd: float | None,
    triggered_by: str,
    catalog: ModelCatalog,
    judge_key_set: bool,
) -> dict[str, Any]:
    """A manual re-scoring run (``POST /api/v1/rescore``, ``assay rescore``): count and estimate the
    suite's items under its current criteria and, unless ``dry_run`` or nothing is to be done, begin
    the run's batch (``batch_id``; the caller then has ``rescore_suite`` fill and score it)."""
    if selection.partial and not dry_run and not judge_key_set:
        raise Conflict(
            "partial scores were made without a judge; re-scoring them now would skip the judge again: "
            "set ANTHROPIC_API_KEY first"
        )
    record = current_suite(session, suite)  # 404 unknown, 409 disabled
    cost = estimate(session, record.current_criteria_hash, record.name, candidates(record, selection), catalog, lane)
    batch_id = None
    if not dry_run and cost.items:
        batch = begin_run(
            session, record.name, selection, triggered_by=triggered_by, lane=lane, budget_usd=budget_usd, scheduled=False
        )
        batch_id = str(batch.id)
    return {
        "suite": record.name,
        "criteria_hash": record.current_criteria_hash,
        "selection": selection.describe(),
        "dry_run": dry_run,
        "estimate": cost.to_dict(),
        "batch_id": batch_id,
    }


def add_wave(session: Session, batch_id: uuid.UUID, selection: Selection, after: uuid.UUID | None, size: int) -> uuid.UUID | None:
    """Add the next ``size`` candidates (by item id, after ``after``) to the batch as pending scores.

    Returns the last item id looked at, or None when there are no more candidates."""
    batch = session.get(Batch, batch_id, with_for_update=True)
    if batch is None or batch.status != "planning":
        return None  # deleted or cancelled meanwhile: stop quietly
    record = session.get(SuiteRecord, batch.suite_name)
    if record is None or record.current_criteria_hash != batch.criteria_hash:
        return None  # the criteria changed mid-run: the next run re-scores under the new hash
    query = select(Item.id).where(candidates(record, selection)).order_by(Item.id).limit(size)
    if after is not None:
        query = query.where(Item.id > after)
    item_ids = session.scalars(query).all()
    if not item_ids:
        return None
    criteria = load_criteria(session, batch.criteria_hash)
    now = utcnow()
    start = session.scalar(select(func.coalesce(func.max(Score.position), 0)).where(Score.batch_id == batch.id)) or 0
    rows = [
        pending_score(
            item_id=item_id,
            suite=batch.suite_name,
            criteria_hash=batch.criteria_hash,
            criteria=criteria,
            triggered_by=batch.created_by,
            created_at=now,
            batch_id=batch.id,
            position=start + offset,
        )
        for offset, item_id in enumerate(item_ids, start=1)
    ]
    # A concurrent run (or a score request) may have given some of these items a score meanwhile.
    inserted = session.execute(
        dialect_insert(session)(Score).on_conflict_do_nothing().returning(Score.position), rows
    ).all()
    # Positions of skipped rows stay unused: the planner walks positions in order, gaps included.
    batch.total_items += len(inserted)
    batch.planner_seen_at = now
    session.flush()
    return item_ids[-1]


def finish_building(session: Session, batch_id: uuid.UUID) -> bool:
    """After the last wave: an empty batch is removed; returns whether there is anything to plan."""
    batch = session.get(Batch, batch_id)
    if batch is None:
        return False
    if batch.total_items == 0 and batch.status == "planning":
        session.delete(batch)
        session.flush()
        return False
    return batch.status == "planning"


# --- one scheduler at a time ------------------------------------------------------------------------------


@contextmanager
def run_lock(key: str) -> Iterator[bool]:
    """A Postgres session advisory lock held on its own connection for the whole run (many
    transactions); released when the run ends or its connection dies with the worker. Yields whether
    it was acquired. SQLite (embedded mode, one process) needs none."""
    from assay.scoring.store.db import get_engine

    engine = get_engine()
    if engine.dialect.name != "postgresql":
        yield True
        return
    with engine.connect() as conn:
        got = conn.execute(text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))"), {"k": key}).scalar()
        conn.commit()
        try:
            yield bool(got)
        finally:
            if got:
                conn.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
                conn.commit()


def suites_to_rescore(session: Session) -> list[SuiteRecord]:
    """Enabled suites (file or API; not disabled or deleted through the API) whose options let the
    nightly run take them."""
    records = session.scalars(select(SuiteRecord).where(SuiteRecord.state == "active").order_by(SuiteRecord.name)).all()
    return [
        r for r in records if (r.options or {}).get("enabled", True) and ((r.options or {}).get("rescore") or {}).get("nightly", True)
    ]


def lane_and_budget(record: SuiteRecord) -> tuple[Lane, float | None]:
    options = (record.options or {}).get("rescore") or {}
    return options.get("lane", "realtime"), options.get("budget_usd")

