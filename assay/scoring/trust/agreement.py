"""Agreement between the machine and people (human labels, :mod:`assay.scoring.trust.labels`), per criteria hash.

For each criteria hash the machine verdict of a labelled item is its latest *completed* machine score
under that hash (calibration repeats left out: :func:`assay.scoring.store.filters.machine_scores`).
The human verdict is the majority of the item's labels in the suite: each label votes pass or fail —
its ``passed``, or, for a label with only a score, whether that score reaches the threshold of the
criteria judged. An item with as many pass as fail votes is a tie: reported apart, left out of the
pass/fail statistics. The human score is the mean of the labels' scores.

Reported: the confusion matrix (machine verdict against majority), accuracy, Cohen's kappa computed from that
matrix, Spearman's rank correlation between the machine total and the human score (None, with the
reason, under 3 pairs or when either side is constant), the ties and the disagreeing items. The same
statistics for each judge component and each jury member's row (``components``): its score against the human score, and as a
verdict, passing when it reaches the suite's threshold (an item where it did not land ``ok`` has no
verdict from it). With ``by`` (``metadata.KEY``, :mod:`assay.scoring.slices`) they are given per slice
of the labelled items too, a slice with fewer than ``MIN_SLICE_ITEMS`` compared items flagged ``small``. A
re-score under new criteria gives the new hash its own numbers, over the same labels.
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from assay.scoring import slices as slicing
from assay.scoring.errors import NotFound
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    CriteriaDefinition,
    Item,
    Label,
    Score,
    ScoreComponent,
    SuiteRecord,
)
from assay.scoring.suites.criteria import load_criteria

MIN_SPEARMAN_PAIRS = 3


@dataclass(frozen=True)
class Confusion:
    """Machine verdict (rows) against the human majority (columns)."""

    both_pass: int = 0  # machine pass, people pass
    machine_only: int = 0  # machine pass, people fail
    human_only: int = 0  # machine fail, people pass
    both_fail: int = 0

    @property
    def n(self) -> int:
        return self.both_pass + self.machine_only + self.human_only + self.both_fail

    def accuracy(self) -> float | None:
        return (self.both_pass + self.both_fail) / self.n if self.n else None

    def kappa(self) -> tuple[float | None, str | None]:
        """Cohen's kappa (observed agreement against the agreement expected from each side's pass
        rate), or None with the reason."""
        n = self.n
        if not n:
            return None, "no item has both a machine verdict and a human majority"
        observed = (self.both_pass + self.both_fail) / n
        machine_pass = (self.both_pass + self.machine_only) / n
        human_pass = (self.both_pass + self.human_only) / n
        expected = machine_pass * human_pass + (1 - machine_pass) * (1 - human_pass)
        if expected >= 1:
            return None, "the machine and the people each gave every item the same verdict: kappa is undefined"
        return (observed - expected) / (1 - expected), None

    def to_dict(self) -> dict[str, int]:
        return {
            "machine_pass_human_pass": self.both_pass,
            "machine_pass_human_fail": self.machine_only,
            "machine_fail_human_pass": self.human_only,
            "machine_fail_human_fail": self.both_fail,
        }


def spearman(
    machine: list[float], human: list[float], what: str = "machine total"
) -> tuple[float | None, float | None, str | None]:
    """(rho, two-sided p-value, None), or (None, None, reason) under 3 pairs or with a constant side;
    ``what`` names the machine side in the reason."""
    if len(machine) < MIN_SPEARMAN_PAIRS:
        return None, None, f"{len(machine)} item(s) with both a {what} and a human score; at least 3 are needed"
    if len(set(machine)) == 1:
        return None, None, f"every {what} is the same: the rank correlation is undefined"
    if len(set(human)) == 1:
        return None, None, "every human score is the same: the rank correlation is undefined"
    # Imported here: scipy costs a second of CPU to import, and every worker, API and CLI process would pay it.
    from scipy.stats import spearmanr

    result = spearmanr(machine, human)
    return float(result.statistic), float(result.pvalue), None


@dataclass
class _ItemLabels:
    votes: list[tuple[bool | None, float | None]] = field(default_factory=list)


def suite_labels(session: Session, suite: str) -> dict[uuid.UUID, _ItemLabels]:
    """Each labelled item of the suite, with its labels' votes."""
    found: dict[uuid.UUID, _ItemLabels] = defaultdict(_ItemLabels)
    for item_id, passed, score in session.execute(
        select(Label.item_id, Label.passed, Label.score).where(Label.suite_name == suite)
    ).all():
        found[item_id].votes.append((passed, score))
    return found


def _latest(suite: str, criteria_hash: str) -> Any:
    """Each labelled item's latest completed machine score under the hash (a subquery)."""
    ranked = (
        select(
            Score.id,
            Score.item_id,
            Score.total,
            Score.passed,
            func.row_number()
            .over(partition_by=Score.item_id, order_by=(Score.completed_at.desc().nulls_last(), Score.created_at.desc()))
            .label("rank"),
        )
        .where(
            Score.suite_name == suite,
            Score.criteria_hash == criteria_hash,
            Score.status == "completed",
            machine_scores(),
            Score.item_id.in_(select(Label.item_id).where(Label.suite_name == suite)),
        )
        .subquery()
    )
    return select(ranked.c.id, ranked.c.item_id, ranked.c.total, ranked.c.passed).where(ranked.c.rank == 1).subquery()


def _latest_scores(session: Session, latest: Any) -> dict[uuid.UUID, tuple[uuid.UUID, float | None, bool | None]]:
    """Item id -> (score id, total, passed) of the latest scores."""
    rows = session.execute(select(latest.c.id, latest.c.item_id, latest.c.total, latest.c.passed))
    return {item_id: (score_id, total, passed) for score_id, item_id, total, passed in rows.all()}


def labelled_hashes(session: Session, suite: str) -> list[str]:
    """The criteria hashes with a completed machine score of a labelled item of the suite, newest criteria first."""
    hashes = (
        select(Score.criteria_hash)
        .where(
            Score.suite_name == suite,
            Score.status == "completed",
            machine_scores(),
            Score.item_id.in_(select(Label.item_id).where(Label.suite_name == suite)),
        )
        .distinct()
        .subquery()
    )
    return list(
        session.scalars(
            select(CriteriaDefinition.criteria_hash)
            .where(CriteriaDefinition.criteria_hash.in_(select(hashes.c.criteria_hash)))
            .order_by(CriteriaDefinition.created_at.desc(), CriteriaDefinition.criteria_hash)
        )
    )


@dataclass(frozen=True)
class _Labelled:
    """One labelled item with a completed machine score under the hash, and its human votes."""

    item_id: uuid.UUID
    score_id: uuid.UUID
    total: float | None
    machine_passed: bool | None
    passes: int
    fails: int
    human_score: float | None
    components: dict[str, float]  # each judge component that landed ok: its score
    slice: str | None = None

    @property
    def human_passed(self) -> bool | None:
        """The majority verdict; None for a tie."""
        return None if self.passes == self.fails else self.passes > self.fails


def _verdict_stats(
    rows: list[_Labelled], machine: Callable[[_Labelled], tuple[float | None, bool | None]], what: str
) -> dict[str, Any]:
    """Accuracy, kappa, Spearman and the confusion matrix of one machine verdict (the total, or a
    component's score against the threshold) with the people's majority, over the non-tied rows."""
    counts = {"both_pass": 0, "machine_only": 0, "human_only": 0, "both_fail": 0}
    machine_values: list[float] = []
    human_scores: list[float] = []
    no_machine_verdict = 0
    for row in rows:
        value, machine_passed = machine(row)
        if value is not None and row.human_score is not None:
            machine_values.append(value)
            human_scores.append(row.human_score)
        human_passed = row.human_passed
        if human_passed is None:
            continue
        if machine_passed is None:
            no_machine_verdict += 1
            continue
        if machine_passed:
            counts["both_pass" if human_passed else "machine_only"] += 1
        else:
            counts["human_only" if human_passed else "both_fail"] += 1
    confusion = Confusion(**counts)
    kappa, kappa_reason = confusion.kappa()
    rho, p_value, rho_reason = spearman(machine_values, human_scores, what=what)
    return {
        "compared_items": confusion.n,
        "no_machine_verdict": no_machine_verdict,
        "accuracy": confusion.accuracy(),
        "kappa": kappa,
        "kappa_reason": kappa_reason,
        "spearman": {"rho": rho, "p_value": p_value, "pairs": len(machine_values), "reason": rho_reason},
        "confusion": confusion.to_dict(),
    }


def _by_verdict(rows: list[_Labelled], judges: list[str], threshold: float) -> dict[str, Any]:
    """The total's statistics and each judge component's: a component passes when its score reaches the
    suite's threshold, and has no verdict where it did not land ``ok``."""

    def component(name: str) -> Callable[[_Labelled], tuple[float | None, bool | None]]:
        def machine(row: _Labelled) -> tuple[float | None, bool | None]:
            score = row.components.get(name)
            return score, None if score is None else score >= threshold

        return machine

    return {
        "total": _verdict_stats(rows, lambda row: (row.total, row.machine_passed), "machine total"),
        "components": {name: _verdict_stats(rows, component(name), f"{name} score") for name in judges},
    }


def _component_scores(session: Session, latest: Any, judges: list[str]) -> dict[uuid.UUID, dict[str, float]]:
    """Score id -> each judge component that landed ok with a score, for the latest scores."""
    found: dict[uuid.UUID, dict[str, float]] = defaultdict(dict)
    if not judges:
        return found
    for score_id, name, score in session.execute(
        select(ScoreComponent.score_id, ScoreComponent.component, ScoreComponent.score)
        .join(latest, latest.c.id == ScoreComponent.score_id)
        .where(ScoreComponent.component.in_(judges), ScoreComponent.status == "ok", ScoreComponent.score.is_not(None))
    ):
        found[score_id][name] = score
    return found


def _slice_values(session: Session, suite: str, key: str) -> dict[uuid.UUID, str | None]:
    """The slice of every labelled item of the suite (only the metadata value is read)."""
    rows = session.execute(
        select(Item.id, slicing.value_json(key)).where(Item.id.in_(select(Label.item_id).where(Label.suite_name == suite)))
    )
    return {item_id: slicing.label_of_json(text, key) for item_id, text in rows}


def hash_agreement(
    session: Session,
    suite: str,
    criteria_hash: str,
    labels: dict[uuid.UUID, _ItemLabels],
    *,
    limit: int,
    slice_values: dict[uuid.UUID, str | None] | None = None,
) -> dict[str, Any]:
    criteria = load_criteria(session, criteria_hash)
    # By name: the stored criteria (JSONB) do not keep the suite file's order.
    threshold, judges = criteria.threshold, sorted(criteria.judged_rows)
    latest = _latest(suite, criteria_hash)
    scores = _latest_scores(session, latest)
    external = dict(
        session.execute(select(Item.id, Item.external_id).where(Item.id.in_(list(scores)))).all()
    ) if scores else {}
    components = _component_scores(session, latest, judges)
    rows: list[_Labelled] = []
    for item_id in sorted(scores, key=str):
        score_id, total, machine_passed = scores[item_id]
        votes = labels[item_id].votes
        passes = sum(1 for passed, score in votes if (passed if passed is not None else score >= threshold))
        given = [score for _, score in votes if score is not None]
        # Rounded so that means equal on paper rank as ties (0.2 and 0.4 average to 0.3, not 0.30000000000000004).
        human_score = round(math.fsum(given) / len(given), 12) if given else None
        rows.append(
            _Labelled(
                item_id, score_id, total, machine_passed, passes, len(votes) - passes, human_score,
                components.get(score_id, {}), (slice_values or {}).get(item_id),
            )
        )
    ties: list[dict[str, Any]] = []
    disagreeing: list[dict[str, Any]] = []
    for row in rows:
        entry = {
            "item_id": str(row.item_id),
            "external_id": external.get(row.item_id),
            "score_id": str(row.score_id),
            "machine_total": row.total,
            "machine_passed": row.machine_passed,
            "human_pass_votes": row.passes,
            "human_fail_votes": row.fails,
            "human_score": row.human_score,
        }
        if row.human_passed is None:
            ties.append(entry)
        elif row.machine_passed is not None and row.machine_passed != row.human_passed:
            gap = abs(row.total - row.human_score) if row.total is not None and row.human_score is not None else None
            disagreeing.append(entry | {"human_passed": row.human_passed, "gap": gap})
    # The largest gaps between machine total and human score first (items without one last).
    disagreeing.sort(key=lambda e: (e["gap"] is None, -(e["gap"] or 0.0), e["item_id"]))
    overall = _by_verdict(rows, judges, threshold)
    report = {
        "criteria_hash": criteria_hash,
        "threshold": threshold,
        "labelled_items": len(labels),
        "scored_items": len(scores),
        "unscored_items": len(labels) - len(scores),
        **overall["total"],
        "components": overall["components"],
        "ties": {"count": len(ties), "items": ties[:limit]},
        "disagreeing": {"count": len(disagreeing), "items": disagreeing[:limit]},
    }
    if slice_values is not None:
        report["slices"] = []
        for found in slicing.group(rows, lambda row: row.slice):
            sliced = _by_verdict(found.rows, judges, threshold)
            report["slices"].append(found.describe(sliced["total"]["compared_items"]) | sliced)
    return report


def suite_agreement(
    session: Session, suite: str, criteria_hash: str | None = None, *, limit: int = 100, by: str | None = None
) -> dict[str, Any]:
    """The agreement report of a suite: per criteria hash (one, or every hash with a labelled item
    scored), for the total and each judge component; per slice of ``by`` (``metadata.KEY``) too."""
    key = slicing.metadata_key(by) if by is not None else None
    record = session.get(SuiteRecord, suite)
    if record is None:
        known = session.scalars(select(SuiteRecord.name).order_by(SuiteRecord.name)).all()
        raise NotFound(f"no suite named {suite!r}; available: {', '.join(known) or 'none'}")
    labels = suite_labels(session, suite)
    if criteria_hash is not None:
        if session.get(CriteriaDefinition, criteria_hash) is None:
            raise NotFound(f"no criteria with hash {criteria_hash}")
        hashes = [criteria_hash]
    else:
        hashes = labelled_hashes(session, suite) if labels else []
    slice_values = _slice_values(session, suite, key) if key is not None and hashes else None
    return {
        "suite": suite,
        "current_criteria_hash": record.current_criteria_hash,
        "labelled_items": len(labels),
        "labels": sum(len(v.votes) for v in labels.values()),
        "by": by,
        "min_slice_items": slicing.MIN_SLICE_ITEMS,
        "hashes": [hash_agreement(session, suite, h, labels, limit=limit, slice_values=slice_values) for h in hashes],
    }
