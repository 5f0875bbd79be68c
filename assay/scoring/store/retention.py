"""Retention: score history that does not grow forever.

Each criteria change adds a full set of score and component rows. A suite's ``retention:`` block
(``keep_criteria: N``, ``keep_days: D``) keeps the batches of its latest N criteria hashes and those
created in the last D days (with both, a batch either keeps is kept); of the others, a batch is
pruned whole, and only when every score in it may go:

- it is finished (never a pending or running score);
- its item has a newer score with an outcome (completed, failed or timed out; a cancelled score
  decides nothing) in the suite, so no item loses its latest word;
- it is not the latest such score of its item under a criteria hash the policy keeps (every hash
  when ``keep_criteria`` is unset);
- no keep rule names it.

Keep rules are how features protect the scores they refer to (the review queue and reviews,
calibration repeats): each registers ``@keep_rule`` with a function returning a one-column SELECT of
score ids, and this module imports none of them (ARCHITECTURE.md, invariant 10). Every process that
prunes imports :mod:`assay.scoring.features` first; :func:`prune` refuses to run with no rule
registered, so a caller that forgot cannot remove what a feature needs.

A pruned batch keeps its row, summary and items, with ``pruned_at`` and ``pruned_scores``. Scores go
in chunks of ``chunk_size``, a transaction each; each chunk asks the rules again, so a score a rule
took up meanwhile stays."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, delete, exists, false, func, or_, select, true, union_all, update
from sqlalchemy.orm import Session, aliased

from assay.scoring.store.db import transaction
from assay.scoring.store.models import (
    FINISHED_SCORE_STATUSES,
    Batch,
    CriteriaDefinition,
    Score,
    ScoreComponent,
    SuiteRecord,
    utcnow,
)

# Scores that settle an item's verdict; a cancelled one decides nothing, so it supersedes nothing.
OUTCOME_STATUSES = ("completed", "failed", "timed_out")

KeepRule = Callable[[], Select[Any]]
_keep_rules: list[KeepRule] = []


def keep_rule(rule: KeepRule) -> KeepRule:
    """Register ``rule()``, a one-column SELECT of score ids that retention must never remove."""
    if rule not in _keep_rules:
        _keep_rules.append(rule)
    return rule


def registered_keep_rules() -> list[str]:
    return [f"{rule.__module__}.{rule.__qualname__}" for rule in _keep_rules]


@dataclass(frozen=True)
class Policy:
    keep_criteria: int | None = None
    keep_days: int | None = None

    @classmethod
    def of(cls, record: SuiteRecord) -> Policy:
        options = (record.options or {}).get("retention") or {}
        return cls(options.get("keep_criteria"), options.get("keep_days"))

    @property
    def active(self) -> bool:
        return self.keep_criteria is not None or self.keep_days is not None


@dataclass(frozen=True)
class PrunableBatch:
    batch_id: uuid.UUID
    criteria_hash: str
    created_at: datetime
    scores: int
    components: int


@dataclass
class SuitePrune:
    suite: str
    policy: Policy
    batches: list[PrunableBatch] = field(default_factory=list)
    removed_scores: int = 0
    removed_components: int = 0


class NoKeepRules(RuntimeError):
    """Pruning with no keep rule registered would remove scores that reviews and calibration need."""


def kept_hashes(session: Session, record: SuiteRecord, keep: int) -> list[str]:
    """The suite's latest ``keep`` criteria hashes: the current one, then those of its batches by
    when each was first registered, newest first."""
    used = session.execute(
        select(CriteriaDefinition.criteria_hash, CriteriaDefinition.created_at)
        .where(CriteriaDefinition.criteria_hash.in_(select(Batch.criteria_hash).where(Batch.suite_name == record.name)))
        .order_by(CriteriaDefinition.created_at.desc(), CriteriaDefinition.criteria_hash)
    ).all()
    ordered = [record.current_criteria_hash] + [row.criteria_hash for row in used if row.criteria_hash != record.current_criteria_hash]
    return ordered[:keep]


def _kept_by_rules(score: Any) -> ColumnElement[bool]:
    if not _keep_rules:
        return false()
    # Uncorrelated: a rule reading ``scores`` lists every score it keeps, not the one asked about.
    rules = union_all(*(rule().correlate(None) for rule in _keep_rules)).subquery()
    return score.id.in_(select(rules.c[0]))


def _must_stay(score: Any, protected: Sequence[str] | None) -> ColumnElement[bool]:
    """Whether ``score`` (the scores table or an alias) of a candidate batch may not go (see the
    module's rules); ``protected``: the hashes whose latest score per item stays (None: every hash)."""
    newer = aliased(Score)
    newer_outcome = and_(
        newer.item_id == score.item_id,
        newer.suite_name == score.suite_name,
        newer.status.in_(OUTCOME_STATUSES),
        newer.calibration_run_id.is_(None),
        newer.created_at > score.created_at,
    )
    latest_under_own_hash = ~exists().where(newer_outcome, newer.criteria_hash == score.criteria_hash)
    is_protected = score.criteria_hash.in_(protected) if protected is not None else true()
    return or_(
        score.status.not_in(FINISHED_SCORE_STATUSES),
        ~exists().where(newer_outcome),
        and_(is_protected, score.status.in_(OUTCOME_STATUSES), latest_under_own_hash),
        _kept_by_rules(score),
    )


def _candidates(session: Session, record: SuiteRecord, policy: Policy, now: datetime) -> tuple[Select[Any], list[str] | None]:
    protected = kept_hashes(session, record, policy.keep_criteria) if policy.keep_criteria is not None else None
    query = select(Batch.id).where(
        Batch.suite_name == record.name,
        Batch.pruned_at.is_(None),
        Batch.finished_at.is_not(None),
        Batch.status.not_in(("planning", "running")),
    )
    if protected is not None:
        query = query.where(Batch.criteria_hash.not_in(protected))
    if policy.keep_days is not None:
        query = query.where(Batch.created_at < now - timedelta(days=policy.keep_days))
    return query, protected


def prunable(session: Session, record: SuiteRecord, now: datetime | None = None) -> list[PrunableBatch]:
    """The suite's batches its policy lets go, oldest first, with what pruning each would remove."""
    policy = Policy.of(record)
    if not policy.active:
        return []
    candidates, protected = _candidates(session, record, policy, now or utcnow())
    staying = aliased(Score)
    blocked = exists().where(staying.batch_id == Batch.id, _must_stay(staying, protected))
    components = (
        select(func.count())
        .select_from(ScoreComponent)
        .join(Score, Score.id == ScoreComponent.score_id)
        .where(Score.batch_id == Batch.id)
        .scalar_subquery()
    )
    rows = session.execute(
        select(Batch.id, Batch.criteria_hash, Batch.created_at, func.count(Score.id), components)
        .join(Score, Score.batch_id == Batch.id)
        .where(Batch.id.in_(candidates), ~blocked)
        .group_by(Batch.id, Batch.criteria_hash, Batch.created_at)
        .order_by(Batch.created_at)
    ).all()
    return [PrunableBatch(r[0], r[1], r[2], r[3], r[4]) for r in rows]


def _prune_chunk(session: Session, record: SuiteRecord, batch_id: uuid.UUID, chunk_size: int) -> tuple[int, int]:
    """Remove up to ``chunk_size`` of the batch's scores that may still go; (scores, components)."""
    policy = Policy.of(record)
    protected = kept_hashes(session, record, policy.keep_criteria) if policy.keep_criteria is not None else None
    ids = list(
        session.scalars(
            select(Score.id).where(Score.batch_id == batch_id, ~_must_stay(Score, protected)).limit(chunk_size)
        )
    )
    if not ids:
        return 0, 0
    components = session.execute(delete(ScoreComponent).where(ScoreComponent.score_id.in_(ids))).rowcount
    scores = session.execute(delete(Score).where(Score.id.in_(ids))).rowcount
    session.execute(
        update(Batch).where(Batch.id == batch_id).values(pruned_scores=Batch.pruned_scores + scores)
    )
    return scores, components


def prune(suite: str | None = None, *, dry_run: bool = False, chunk_size: int = 1000) -> list[SuitePrune]:
    """Apply every suite's retention policy (or ``suite``'s): what was removed, or with ``dry_run``
    what would be. Runs its own transactions: one to find the batches, then one per chunk."""
    if not _keep_rules:
        raise NoKeepRules("no retention keep rule is registered: import assay.scoring.features before pruning")
    with transaction() as session:
        query = select(SuiteRecord).order_by(SuiteRecord.name)
        if suite is not None:
            query = query.where(SuiteRecord.name == suite)
        records = list(session.scalars(query))
        plans = [SuitePrune(r.name, Policy.of(r), prunable(session, r)) for r in records if Policy.of(r).active]
    if dry_run:
        return plans
    for plan in plans:
        for batch in plan.batches:
            _prune_batch(plan, batch.batch_id, chunk_size)
    return plans


def _prune_batch(plan: SuitePrune, batch_id: uuid.UUID, chunk_size: int) -> None:
    with transaction() as session:
        # Checked again under the row's lock: a batch that gained a kept score since is left whole.
        record = session.get(SuiteRecord, plan.suite)
        row = session.scalar(select(Batch).where(Batch.id == batch_id).with_for_update())
        if record is None or row is None or row.pruned_at is not None:
            return
        if batch_id not in {b.batch_id for b in prunable(session, record)}:
            return
        row.pruned_at = utcnow()
        scores, components = _prune_chunk(session, record, batch_id, chunk_size)
    while scores:
        plan.removed_scores += scores
        plan.removed_components += components
        with transaction() as session:
            record = session.get(SuiteRecord, plan.suite)
            assert record is not None
            scores, components = _prune_chunk(session, record, batch_id, chunk_size)
