"""The review queue: finalized machine scores a suite's review rules pick for a person to look at.

A suite declares its rules under ``review:`` (:class:`~assay.scoring.suites.loader.ReviewRules`, operational
options: changing them restales nothing)::

    review:
      near_threshold: 0.05       # |total - threshold| <= 0.05
      disagreement: [{components: [correctness, faithfulness], more_than: 0.4}]
      repaired: true             # a judge answer that needed a repair request
      random_share: 0.02         # drawn from the score id

- **Entering.** :func:`after_finalize`, a scores-finalized hook, runs in the finalize transaction (``pipeline.finalize.finalize_scores``).
  A *completed* machine score matching any rule enters the queue once (``review_queue.score_id`` is
  unique, the insert does nothing on conflict), with each matching rule and its detail as its
  reasons. The random share is decided by the score id (SHA-256 of it as a number in [0, 1)), so a
  redelivered finalize draws the same. Failed, timed-out and cancelled scores, and calibration
  scores (``calibration_run_id`` set), never enter.
- **Closing.** A completed re-score of the same item and suite closes the older scores' open entries
  (``closed``); reviews already recorded stay, and so do their labels.
- **Reviewing.** :func:`record_review` stores the verdict with the reviewer (the principal, ``key:NAME``
  or ``proxy:NAME``) and the time, marks the entry ``reviewed`` and upserts the reviewer's label on
  the item (``labels``, source ``review``): a reviewed item is a gold label. The machine score is never changed; machine
  aggregates (pass rates, compare, diff, training data) read only the machine score.
- **Reading.** :func:`human_verdicts` gives, per item, the latest review and the majority of the
  item's labels, for the item and batch pages and every export (:data:`HUMAN_COLUMNS`).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

from pydantic import ValidationError
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session, object_session

from assay.scoring.errors import Conflict, InvalidInput, NotFound
from assay.scoring.pipeline.hooks import Finalized, on_scores_finalized
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.retention import keep_rule
from assay.scoring.store.models import (
    Item,
    Label,
    Review,
    ReviewQueueEntry,
    Score,
    SuiteRecord,
    utcnow,
)
from assay.scoring.suites.loader import ReviewRules

log = logging.getLogger(__name__)

RULES = ("near_threshold", "disagreement", "repaired", "random")
# The human verdict columns every export appends after the machine ones (see ``human_cells``).
HUMAN_COLUMNS = (
    "human_reviewer",
    "human_passed",
    "human_score",
    "human_comment",
    "human_reviewed_at",
    "human_labels",
    "human_majority",
)
COMMENT_MAX = 10_000


# --- rules ---------------------------------------------------------------------------------------------------


def random_draw(score_id: uuid.UUID | str) -> float:
    """The score's draw in [0, 1): the first 8 bytes of SHA-256 of its id, as a fraction of 2**64."""
    digest = hashlib.sha256(str(score_id).encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def match_rules(
    rules: ReviewRules, *, score_id: uuid.UUID | str, total: float | None, threshold: float, components: Iterable[Any]
) -> list[dict[str, Any]]:
    """The rules a completed score matches, each as ``{"rule": name, ...detail}``, in :data:`RULES`
    order. ``components``: rows or objects with ``component``, ``status``, ``score`` and ``details``;
    only components that landed ``ok`` count for a disagreement, and a disagreement needs two of its
    named components scored."""
    comps = list(components)
    reasons: list[dict[str, Any]] = []
    if rules.near_threshold is not None and total is not None:
        distance = abs(total - threshold)
        if distance <= rules.near_threshold + 1e-12:
            reasons.append(
                {"rule": "near_threshold", "total": total, "threshold": threshold, "within": rules.near_threshold}
            )
    scored = {c.component: c.score for c in comps if c.status == "ok" and c.score is not None}
    for rule in rules.disagreement:
        named = {name: scored[name] for name in rule.components if name in scored}
        if len(named) < 2:
            continue
        spread = max(named.values()) - min(named.values())
        if spread > rule.more_than + 1e-12:
            reasons.append({"rule": "disagreement", "scores": named, "spread": round(spread, 6), "more_than": rule.more_than})
    if rules.repaired:
        repaired = [c.component for c in comps if c.status == "ok" and (c.details or {}).get("repaired")]
        if repaired:
            reasons.append({"rule": "repaired", "components": repaired})
    if rules.random_share > 0:
        draw = random_draw(score_id)
        if draw < rules.random_share:
            reasons.append({"rule": "random", "share": rules.random_share, "draw": round(draw, 6)})
    return reasons


def describe(reason: dict[str, Any]) -> str:
    """One reason as a short sentence (the dashboard's queue lists these)."""
    rule = reason.get("rule")
    if rule == "near_threshold":
        return f"total {reason['total']:.3f} within {reason['within']:g} of the threshold {reason['threshold']:g}"
    if rule == "disagreement":
        scores = ", ".join(f"{name} {value:.2f}" for name, value in reason["scores"].items())
        return f"components disagree by {reason['spread']:.2f} (> {reason['more_than']:g}): {scores}"
    if rule == "repaired":
        return "a judge answer needed a repair: " + ", ".join(reason["components"])
    if rule == "random":
        return f"random sample ({100 * reason['share']:g}% of scores)"
    return str(rule)


# --- at finalize -----------------------------------------------------------------------------------------------

# The finalize path's statements, built once: it runs for every group of completed scores (building
# and cache-keying a statement costs more CPU than running it).
_FINALIZED_ROWS = (
    select(Score.id, Score.calibration_run_id, Score.created_at, SuiteRecord.options)
    .outerjoin(SuiteRecord, SuiteRecord.name == Score.suite_name)
    .where(Score.id.in_(bindparam("b_score_ids", expanding=True)))
)
_SUITES_WITH_OPEN_ENTRIES = (
    select(ReviewQueueEntry.suite_name)
    .where(ReviewQueueEntry.suite_name.in_(bindparam("b_suite_names", expanding=True)), ReviewQueueEntry.status == "open")
    .distinct()
)
_CLOSE_OLDER_ENTRIES = (
    update(ReviewQueueEntry)
    .where(
        ReviewQueueEntry.suite_name == bindparam("b_suite_name"),
        ReviewQueueEntry.item_id == bindparam("b_item_id"),
        ReviewQueueEntry.status == "open",
        ReviewQueueEntry.score_id.in_(
            select(Score.id).where(
                Score.item_id == bindparam("b_older_item_id"),
                Score.suite_name == bindparam("b_older_suite_name"),
                Score.created_at <= bindparam("b_created_at"),
                Score.id != bindparam("b_score_id"),
                machine_scores(),
            )
        ),
    )
    .values(status="closed", closed_at=bindparam("b_now"))
    .execution_options(synchronize_session=False)
)


def suite_rules(options: dict[str, Any] | None, suite_name: str) -> ReviewRules:
    """The review rules stored with a suite's options (none when it declares none)."""
    try:
        return ReviewRules.model_validate((options or {}).get("review") or {})
    except ValidationError as exc:  # stored by an older or newer release: no queue rather than a failed finalize
        log.warning("suite %s: its stored review rules are unusable, no score enters the queue: %s", suite_name, exc)
        return ReviewRules()


@on_scores_finalized
def after_finalize(session: Session, finalized: Sequence[Finalized]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """In the finalize transaction of a set of scores: each completed machine score enters the queue
    when it matches one of its suite's rules, and closes the open entries of the item's older scores
    in the suite. Set-based: one read of the scores and their suites, one insert, and the closing
    only for suites that have open entries. Idempotent (a redelivered finalize inserts nothing new).
    Returns the reasons each score matched (only those that matched)."""
    completed = [f for f in finalized if f.status == "completed"]
    if not completed:
        return {}
    rows = {row.id: row for row in session.execute(_FINALIZED_ROWS, {"b_score_ids": [f.score_id for f in completed]})}
    machine = [f for f in completed if f.score_id in rows and rows[f.score_id].calibration_run_id is None]
    if not machine:
        return {}
    rules_of: dict[str, ReviewRules] = {}
    matched: dict[uuid.UUID, list[dict[str, Any]]] = {}
    entries = []
    now = utcnow()
    for f in machine:
        if f.suite_name not in rules_of:
            rules_of[f.suite_name] = suite_rules(rows[f.score_id].options, f.suite_name)
        rules = rules_of[f.suite_name]
        if not rules.active:
            continue
        reasons = match_rules(rules, score_id=f.score_id, total=f.total, threshold=f.threshold, components=f.components)
        if reasons:
            matched[f.score_id] = reasons
            entries.append(
                {
                    "id": uuid.uuid4(), "score_id": f.score_id, "suite_name": f.suite_name, "item_id": f.item_id,
                    "criteria_hash": f.criteria_hash, "reasons": reasons, "status": "open", "created_at": now,
                }
            )
    if entries:
        session.connection().execute(
            dialect_insert(session)(ReviewQueueEntry).on_conflict_do_nothing(index_elements=["score_id"]), entries
        )
    # After the inserts, so that of two scores of one item finalized together only the newer stays open.
    open_suites = set(session.scalars(_SUITES_WITH_OPEN_ENTRIES, {"b_suite_names": sorted({f.suite_name for f in machine})}))
    closing = [
        {
            "b_suite_name": f.suite_name, "b_item_id": f.item_id, "b_older_suite_name": f.suite_name,
            "b_older_item_id": f.item_id, "b_created_at": rows[f.score_id].created_at, "b_score_id": f.score_id,
            "b_now": now,
        }
        for f in machine
        if f.suite_name in open_suites
    ]
    if closing:  # Core executemany: the ORM would read a list of parameters as updates by primary key
        session.connection().execute(_CLOSE_OLDER_ENTRIES, closing)
    return matched


@keep_rule
def queued_scores() -> Any:
    """Retention never removes a score a person is or was asked to review (open or closed entries)."""
    return select(ReviewQueueEntry.score_id)


@keep_rule
def reviewed_scores() -> Any:
    """Retention never removes a score a person reviewed."""
    return select(Review.score_id)


# --- the queue -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueEntry:
    id: uuid.UUID
    suite: str
    status: str
    score_id: uuid.UUID
    item_id: uuid.UUID
    external_id: str | None
    batch_id: uuid.UUID | None
    criteria_hash: str
    total: float | None
    passed: bool | None
    reasons: list[dict[str, Any]]
    created_at: datetime
    closed_at: datetime | None

    @property
    def reason_texts(self) -> list[str]:
        return [describe(r) for r in self.reasons]

    def as_dict(self) -> dict[str, Any]:
        return {
            "entry_id": str(self.id),
            "suite": self.suite,
            "status": self.status,
            "score_id": str(self.score_id),
            "item_id": str(self.item_id),
            "external_id": self.external_id,
            "batch_id": str(self.batch_id) if self.batch_id else None,
            "criteria_hash": self.criteria_hash,
            "machine": {"total": self.total, "passed": self.passed},
            "reasons": [{**r, "text": describe(r)} for r in self.reasons],
            "created_at": self.created_at.isoformat(),
            "closed_at": self.closed_at.isoformat() if self.closed_at else None,
        }


_ENTRY_COLUMNS = (
    ReviewQueueEntry.id,
    ReviewQueueEntry.suite_name,
    ReviewQueueEntry.status,
    ReviewQueueEntry.score_id,
    ReviewQueueEntry.item_id,
    Item.external_id,
    Score.batch_id,
    ReviewQueueEntry.criteria_hash,
    Score.total,
    Score.passed,
    ReviewQueueEntry.reasons,
    ReviewQueueEntry.created_at,
    ReviewQueueEntry.closed_at,
)


def _entries_query() -> Any:
    return (
        select(*_ENTRY_COLUMNS)
        .join(Score, Score.id == ReviewQueueEntry.score_id)
        .join(Item, Item.id == ReviewQueueEntry.item_id)
    )


def _entry(row: Any) -> QueueEntry:
    return QueueEntry(*row)


def list_queue(
    session: Session, suite_name: str, *, status: str = "open", limit: int = 50, offset: int = 0
) -> tuple[list[QueueEntry], int]:
    """A suite's entries with ``status`` (oldest first: the order they entered), and how many there are."""
    where = (ReviewQueueEntry.suite_name == suite_name, ReviewQueueEntry.status == status)
    total = session.scalar(select(func.count()).select_from(ReviewQueueEntry).where(*where)) or 0
    rows = session.execute(
        _entries_query().where(*where).order_by(ReviewQueueEntry.created_at, ReviewQueueEntry.id).limit(limit).offset(offset)
    ).all()
    return [_entry(r) for r in rows], total


def get_entry(session: Session, entry_id: uuid.UUID) -> QueueEntry:
    row = session.execute(_entries_query().where(ReviewQueueEntry.id == entry_id)).first()
    if row is None:
        raise NotFound(f"no review queue entry {entry_id}")
    return _entry(row)


def open_entry_for_score(session: Session, score_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
    """score id -> its open entry's id, for the scores that have one."""
    if not score_ids:
        return {}
    rows = session.execute(
        select(ReviewQueueEntry.score_id, ReviewQueueEntry.id).where(
            ReviewQueueEntry.score_id.in_(list(score_ids)), ReviewQueueEntry.status == "open"
        )
    )
    return {score_id: entry_id for score_id, entry_id in rows}


def open_counts(session: Session, *, every_suite: bool = False) -> dict[str, int]:
    """Open entries per suite, by suite name: only suites with one open, or (``every_suite``) every
    suite that is not deleted, with 0 where none is open."""
    rows = session.execute(
        select(ReviewQueueEntry.suite_name, func.count())
        .where(ReviewQueueEntry.status == "open")
        .group_by(ReviewQueueEntry.suite_name)
    )
    counts = {suite: int(n) for suite, n in rows}
    if every_suite:
        names = session.scalars(select(SuiteRecord.name).where(SuiteRecord.state != "deleted"))
        counts = {name: 0 for name in names} | counts
    return dict(sorted(counts.items()))


def queue_counts(session: Session) -> dict[str, dict[str, int]]:
    """Entries per suite and status (open, reviewed, closed), for every suite with an entry."""
    counts: dict[str, dict[str, int]] = {}
    rows = session.execute(
        select(ReviewQueueEntry.suite_name, ReviewQueueEntry.status, func.count()).group_by(
            ReviewQueueEntry.suite_name, ReviewQueueEntry.status
        )
    )
    for suite, status, n in rows:
        counts.setdefault(suite, {"open": 0, "reviewed": 0, "closed": 0})[status] = int(n)
    return dict(sorted(counts.items()))


# --- recording a review ------------------------------------------------------------------------------------------


def record_review(
    session: Session,
    entry_id: uuid.UUID,
    *,
    reviewer: str,
    passed: bool,
    score: float | None = None,
    comment: str | None = None,
) -> Review:
    """Store a person's verdict on the entry's machine score (never changing the score), mark the entry
    reviewed and make the verdict the reviewer's label on the item (replacing their earlier label).
    A closed entry (its item was re-scored since) is refused with 409; an entry already reviewed takes
    another review (another reviewer adds theirs; the same reviewer replaces their label)."""
    if not reviewer.strip():
        raise InvalidInput("a review needs a reviewer name")
    if score is not None and not 0.0 <= score <= 1.0:
        raise InvalidInput(f"score {score} is outside 0..1")
    entry = session.scalars(
        select(ReviewQueueEntry).where(ReviewQueueEntry.id == entry_id).with_for_update()
    ).one_or_none()
    if entry is None:
        raise NotFound(f"no review queue entry {entry_id}")
    if entry.status == "closed":
        raise Conflict(
            f"review queue entry {entry_id} is closed: its item was re-scored since; review the newer score instead"
        )
    now = utcnow()
    comment = (comment or "").strip()[:COMMENT_MAX] or None
    review = Review(
        id=uuid.uuid4(),
        queue_entry_id=entry.id,
        score_id=entry.score_id,
        item_id=entry.item_id,
        suite_name=entry.suite_name,
        reviewer=reviewer[:255],
        passed=passed,
        score=score,
        comment=comment,
        created_at=now,
    )
    session.add(review)
    entry.status = "reviewed"
    # The reviewer's principal is the label's annotator and writer: only that principal writes labels
    # under its own name (``trust.labels``), so this replaces nobody else's.
    label = {"passed": passed, "score": score, "comment": comment, "source": "review", "written_by": reviewer[:255], "updated_at": now}
    session.execute(
        dialect_insert(session)(Label)
        .values(id=uuid.uuid4(), suite_name=entry.suite_name, item_id=entry.item_id, annotator=reviewer[:255], created_at=now, **label)
        .on_conflict_do_update(index_elements=["suite_name", "item_id", "annotator"], set_=label)
    )
    session.flush()
    return review


def review_view(review: Review) -> dict[str, Any]:
    return {
        "review_id": str(review.id),
        "entry_id": str(review.queue_entry_id) if review.queue_entry_id else None,
        "score_id": str(review.score_id),
        "item_id": str(review.item_id),
        "suite": review.suite_name,
        "reviewer": review.reviewer,
        "passed": review.passed,
        "score": review.score,
        "comment": review.comment,
        "created_at": review.created_at.isoformat(),
    }


def reviews_of_entry(session: Session, entry_id: uuid.UUID) -> list[Review]:
    return list(
        session.scalars(select(Review).where(Review.queue_entry_id == entry_id).order_by(Review.created_at, Review.id))
    )


def reviews_of_scores(session: Session, score_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[Review]]:
    """Every review of each score, oldest first."""
    found: dict[uuid.UUID, list[Review]] = {}
    if score_ids:
        for review in session.scalars(
            select(Review).where(Review.score_id.in_(list(score_ids))).order_by(Review.created_at, Review.id)
        ):
            found.setdefault(review.score_id, []).append(review)
    return found


# --- human verdicts beside machine ones ------------------------------------------------------------------------


@dataclass(frozen=True)
class HumanVerdict:
    """What people said about an item in a suite: the latest review (if any) and the item's labels."""

    reviewer: str | None
    passed: bool | None
    score: float | None
    comment: str | None
    reviewed_at: datetime | None
    labels: int  # labels on the item in the suite (uploaded and from reviews)
    majority: str | None  # "pass", "fail" or "tie" over the labels with a pass/fail; None without any

    def cells(self) -> dict[str, Any]:
        return {
            "human_reviewer": self.reviewer,
            "human_passed": self.passed,
            "human_score": self.score,
            "human_comment": self.comment,
            "human_reviewed_at": self.reviewed_at.isoformat() if self.reviewed_at else None,
            "human_labels": self.labels,
            "human_majority": self.majority,
        }


EMPTY_CELLS: dict[str, Any] = {column: None for column in HUMAN_COLUMNS} | {"human_labels": 0}


def human_cells(verdict: HumanVerdict | None) -> dict[str, Any]:
    """The :data:`HUMAN_COLUMNS` of one result (empty, with 0 labels, when nobody labelled the item)."""
    return verdict.cells() if verdict is not None else dict(EMPTY_CELLS)


def majority(votes: Iterable[bool]) -> str | None:
    counted = Counter(votes)
    if not counted:
        return None
    if counted[True] == counted[False]:
        return "tie"
    return "pass" if counted[True] > counted[False] else "fail"


def human_verdicts(session: Session, suite_name: str, item_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, HumanVerdict]:
    """Per item (of those with a review or a label in the suite): the latest review and the labels."""
    ids = list(dict.fromkeys(item_ids))
    if not ids:
        return {}
    latest: dict[uuid.UUID, Review] = {}
    for review in session.scalars(
        select(Review)
        .where(Review.suite_name == suite_name, Review.item_id.in_(ids))
        .order_by(Review.item_id, Review.created_at.desc(), Review.id.desc())
    ):
        latest.setdefault(review.item_id, review)
    votes: dict[uuid.UUID, list[bool]] = {}
    counts: Counter[uuid.UUID] = Counter()
    for item_id, passed in session.execute(
        select(Label.item_id, Label.passed).where(Label.suite_name == suite_name, Label.item_id.in_(ids))
    ):
        counts[item_id] += 1
        if passed is not None:
            votes.setdefault(item_id, []).append(passed)
    found = {}
    for item_id in set(latest) | set(counts):
        review = latest.get(item_id)
        found[item_id] = HumanVerdict(
            reviewer=review.reviewer if review else None,
            passed=review.passed if review else None,
            score=review.score if review else None,
            comment=review.comment if review else None,
            reviewed_at=review.created_at if review else None,
            labels=counts[item_id],
            majority=majority(votes.get(item_id, [])),
        )
    return found


def with_human_verdicts(
    scores: Iterable[Score], *, session: Session | None = None, chunk: int = 500
) -> Iterator[tuple[Score, HumanVerdict | None]]:
    """Each score with its item's human verdict in the score's suite, looked up a chunk at a time
    (flat memory for a streamed export). ``session``: where to look; by default the session a chunk's
    first score belonged to when it was read (taken then: a keyset reader such as
    ``batches.iter_results`` detaches its rows once it moves on). Scores that belong to no session
    get no verdict."""
    it = iter(scores)
    while True:
        block: list[Score] = []
        reader = session
        for score in islice(it, chunk):
            block.append(score)
            if reader is None:
                reader = object_session(score)
        if not block:
            return
        if reader is None:
            yield from ((s, None) for s in block)
            continue
        by_suite: dict[str, list[uuid.UUID]] = {}
        for s in block:
            by_suite.setdefault(s.suite_name, []).append(s.item_id)
        verdicts = {suite: human_verdicts(reader, suite, ids) for suite, ids in by_suite.items()}
        for s in block:
            yield s, verdicts[s.suite_name].get(s.item_id)

