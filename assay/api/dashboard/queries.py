"""Read-only queries behind the dashboard pages (the store is the only source; nothing here writes)."""

from __future__ import annotations

import re
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session, selectinload

from assay.scoring.errors import NotFound
from assay.scoring.intake import batches as svc
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import Batch, CriteriaDefinition, Item, Label, Score, ScoreComponent, SuiteRecord
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.jury import SEPARATOR
from assay.scoring.suites.loader import Criteria

SESSION_KIND = "alert_session"
ACTIVE = ("pending", "in_progress")
FINISHED_BAD = ("failed", "timed_out")


# --- score bands (the alert-session scoring design) -------------------------------------------------------

# (lowest score of the band, css class, label), the alert-session scoring design's five colour bands.
BANDS = (
    (90, "band-darkgreen", "near-perfect"),
    (75, "band-lightgreen", "good"),
    (60, "band-yellow", "adequate"),
    (45, "band-orange", "weak"),
    (0, "band-red", "failed"),
)

# ("0–44", css class, label), low to high, for the legend.
LEGEND = tuple(
    (f"{low}–{(BANDS[i - 1][0] - 1) if i else 100}", css, label) for i, (low, css, label) in enumerate(BANDS)
)[::-1]


def band(score100: int | None) -> tuple[str, str]:
    """(css class, label) of a 0–100 score; ``band-none``/"not scored" for None."""
    if score100 is None:
        return "band-none", "not scored"
    for low, css, label in BANDS:
        if score100 >= low:
            return css, label
    return BANDS[-1][1], BANDS[-1][2]


def score100(total: float | None) -> int | None:
    """A 0..1 total as the alert-session scoring design's integer 0–100 (the ``session_scores`` view's rounding)."""
    return None if total is None else int(round(100 * total))


# --- batches ----------------------------------------------------------------------------------------------


def batch_costs(session: Session, batch_ids: list[uuid.UUID]) -> dict[uuid.UUID, float]:
    if not batch_ids:
        return {}
    rows = session.execute(
        select(Score.batch_id, func.coalesce(func.sum(Score.cost_usd), 0.0))
        .where(Score.batch_id.in_(batch_ids))
        .group_by(Score.batch_id)
    ).all()
    return {batch_id: float(cost) for batch_id, cost in rows}


def batch_row(batch: Batch, progress: dict[str, Any], cost: float) -> dict[str, Any]:
    """What the batches list (and its live refresh) shows for one batch."""
    completed = progress.get("completed", 0)
    return {
        "batch_id": str(batch.id),
        "suite": batch.suite_name,
        "status": batch.status,
        "created_by": batch.created_by,
        "created_at": batch.created_at,
        "total": progress.get("total", batch.total_items),
        "done": progress.get("done", 0),
        "percent": progress.get("percent", 0.0),
        "completed": completed,
        "passed": progress.get("passed", 0),
        "failed": progress.get("failed", 0),
        "errored": progress.get("errored", 0),
        "cancelled": progress.get("cancelled", 0),
        "pass_rate": (progress.get("passed", 0) / completed) if completed else None,
        "cost_usd": cost,
        "eta_seconds": progress.get("eta_seconds"),
        "rate_per_second": progress.get("rate_per_second"),
        "active": batch.status in ("planning", "running"),
    }


def list_batch_rows(session: Session, *, limit: int, offset: int, suite: str | None = None) -> list[dict[str, Any]]:
    rows = svc.list_batches(session, limit=limit, offset=offset, suite=suite)
    costs = batch_costs(session, [b.id for b in rows])
    return [batch_row(b, svc.progress(session, b), costs.get(b.id, 0.0)) for b in rows]


def batch_rows_by_id(session: Session, ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    batches = list(session.scalars(select(Batch).where(Batch.id.in_(ids)))) if ids else []
    costs = batch_costs(session, [b.id for b in batches])
    return [batch_row(b, svc.progress(session, b), costs.get(b.id, 0.0)) for b in batches]


def suite_names(session: Session) -> list[str]:
    return list(session.scalars(select(SuiteRecord.name).order_by(SuiteRecord.name)))


def histogram(session: Session, batch_id: uuid.UUID, bins: int = 10) -> list[int]:
    """Counts of finished totals in ``bins`` equal bins over [0, 1] (a total of 1.0 goes in the last)."""
    where = and_(Score.batch_id == batch_id, Score.status == "completed", Score.total.is_not(None))
    counts = [0] * bins
    if session.get_bind().dialect.name == "postgresql":
        bucket = func.least(func.width_bucket(Score.total, 0.0, 1.0, bins), bins)
        for b, n in session.execute(select(bucket, func.count()).where(where).group_by(bucket)):
            counts[max(1, int(b)) - 1] += n
        return counts
    for (total,) in session.execute(select(Score.total).where(where)):
        counts[min(bins - 1, int(total * bins))] += 1
    return counts


def result_section(
    session: Session, batch_id: uuid.UUID, section: str, *, limit: int, offset: int
) -> tuple[list[Score], int]:
    """Design 000's summary sections: ``success`` (score ≥ threshold) or ``error`` (below the threshold,
    blocked from passing, or not scored because a component failed or timed out)."""
    query = select(Score).where(Score.batch_id == batch_id)
    if section == "success":
        query = query.where(Score.status == "completed", Score.passed.is_(True))
    else:
        query = query.where(
            or_(Score.status.in_(FINISHED_BAD), and_(Score.status == "completed", Score.passed.is_(False)))
        )
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.options(selectinload(Score.components), selectinload(Score.item))
        .order_by(Score.position)
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total


# --- judge details of a score -----------------------------------------------------------------------------


@dataclass
class JudgeView:
    """What one judge component said, whichever kind: KQL's reasoning, an alert session's EP-0028
    fields, or a rubric verdict (its answer, per-criterion scores), and how the answer came: its raw
    text when unusable, whether a repair was asked for, whether it was carried over from an earlier score."""

    component: str
    status: str
    reason: str | None = None
    reasoning: str | None = None
    # A rubric verdict's answer: the scale value, the label, true/false or the 0-1 score.
    answer: Any = None
    answer_range: str | None = None  # "1–5" for a scale
    criteria: list[dict[str, Any]] = field(default_factory=list)  # name, score, weight, reasoning
    breakdown: dict[str, Any] = field(default_factory=dict)
    missing_tools: list[dict[str, Any]] = field(default_factory=list)
    approaches: list[dict[str, Any]] = field(default_factory=list)
    other: dict[str, Any] = field(default_factory=dict)
    raw_output: str | None = None
    repaired: bool = False
    carried_over_from: str | None = None
    judge: str | None = None  # "provider · model" that judged it (Anthropic's details name no provider)
    lane: str | None = None  # "batch" when its answer came through the provider's batch API
    cost_usd: float = 0.0
    # A jury's members as it aggregated them: name -> provider, model, weight, status, verdict, score,
    # reasoning (or reason), cost_usd; with ``aggregate``, ``answered``, ``min_members`` beside them.
    jury: dict[str, Any] = field(default_factory=dict)

    @property
    def breakdown_scale(self) -> int:
        """What the breakdown's numbers are out of: the alert-session scoring design's four dimensions are 0–25 each; other
        breakdowns are read as 0–100 (or 0–1)."""
        numbers = [v for v in self.breakdown.values() if isinstance(v, (int, float))]
        top = max(numbers, default=100)
        return 1 if top <= 1 else 25 if top <= 25 else 100


# Design 001's dimensions in the judge prompt's order (JSONB hands keys back in its own order).
DIMENSIONS = ("logical_flow", "consistency", "tool_relevance", "synthesis_quality")


def ordered_breakdown(breakdown: dict[str, Any]) -> dict[str, Any]:
    known = {k: breakdown[k] for k in DIMENSIONS if k in breakdown}
    return {**known, **{k: v for k, v in breakdown.items() if k not in known}}


_JUDGE_KEYS = ("score_reasoning", "reasoning", "score_breakdown", "missing_tools", "alternative_approaches")
# Details keys a rubric verdict's answer is stored under (judge.rubrics), in the order looked for.
_ANSWER_KEYS = ("scale", "label", "passed", "score")
_SHOWN = {
    "score_reasoning", "reasoning", "score_breakdown", "breakdown", "missing_tools", "alternative_approaches",
    "verdict", "criteria", "min", "max", "repaired", "provider", "model", "lane", "jury", *_ANSWER_KEYS,
}


def _judge_view(component: ScoreComponent) -> JudgeView:
    details = dict(component.details or {})
    verdict = details.get("verdict") if isinstance(details.get("verdict"), dict) else {}
    merged = {**verdict, **details}
    view = JudgeView(
        component=component.component,
        status=component.status,
        reason=component.reason,
        raw_output=component.raw_output,
        repaired=bool(details.get("repaired")),
        carried_over_from=str(component.carried_over_from) if component.carried_over_from else None,
        cost_usd=component.cost_usd or 0.0,
    )
    if isinstance(details.get("jury"), dict):
        view.jury = details["jury"]
    view.reasoning = merged.get("score_reasoning") or merged.get("reasoning")
    breakdown = merged.get("score_breakdown") or merged.get("breakdown")
    view.breakdown = ordered_breakdown(breakdown) if isinstance(breakdown, dict) else {}
    tools = merged.get("missing_tools")
    view.missing_tools = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    approaches = merged.get("alternative_approaches")
    view.approaches = [a for a in approaches if isinstance(a, dict)] if isinstance(approaches, list) else []
    criteria = details.get("criteria")
    if isinstance(criteria, dict):
        view.criteria = [{"name": name, **entry} for name, entry in criteria.items() if isinstance(entry, dict)]
    else:
        view.answer = next((details[k] for k in _ANSWER_KEYS if k in details), None)
    if isinstance(details.get("min"), int) and isinstance(details.get("max"), int):
        view.answer_range = f"{details['min']}–{details['max']}"
    if isinstance(details.get("model"), str):
        view.judge = f"{details.get('provider') or 'anthropic'} · {details['model']}"
    view.lane = details.get("lane") if isinstance(details.get("lane"), str) else None
    view.other = {k: v for k, v in details.items() if k not in _SHOWN}
    return view


def judge_views(score: Score, judge_components: list[str] | None = None) -> list[JudgeView]:
    """One view per judge component of a score, in the suite's order. Without the names (the criteria
    are gone), every component whose details carry judge fields."""
    by_name = {c.component: c for c in score.components}
    if judge_components is None:
        chosen = [c for c in score.components if any(k in (c.details or {}) for k in _JUDGE_KEYS)]
    else:
        chosen = [by_name[name] for name in judge_components if name in by_name]
    return [_judge_view(c) for c in chosen]


def breakdown_rows(components: dict[str, dict[str, Any]], judges: list[JudgeView]) -> list[dict[str, Any]]:
    """A score's component rows (``score_view``'s) for its breakdown table, each jury's members
    (``jury@member``, as the API names them) right under it with ``member_of`` set; with each judge
    row's ``verdict`` (its answer, as its panel shows it)."""
    answers = {j.component: j.answer for j in judges}

    def jury_of(name: str) -> str | None:
        jury, separator, _ = name.partition(SEPARATOR)
        return jury if separator and jury in components else None

    members: dict[str, list[str]] = defaultdict(list)
    for name in components:
        if (jury := jury_of(name)) is not None:
            members[jury].append(name)
    return [
        {**components[row], "name": row, "member_of": jury, "verdict": answers.get(row)}
        for name in components if jury_of(name) is None
        for row, jury in ((name, None), *((m, name) for m in members[name]))
    ]


def judge_component_names(session: Session, criteria_hash: str) -> list[str] | None:
    """The judge components of a criteria version, a jury's members before it, in its order; None
    when it is not stored."""
    try:
        return load_criteria(session, criteria_hash).judged_rows
    except NotFound:
        return None


# --- items and sessions -----------------------------------------------------------------------------------


def current_hashes(session: Session) -> dict[str, str]:
    return {s.name: s.current_criteria_hash for s in session.scalars(select(SuiteRecord))}


def item_with_scores(session: Session, item_id: uuid.UUID) -> tuple[Item, list[Score]]:
    item, scores = svc.get_item(session, item_id)
    return item, sorted(scores, key=lambda s: s.created_at, reverse=True)


def session_item(session: Session, session_id: str) -> Item:
    item = session.scalars(
        select(Item).where(Item.kind == SESSION_KIND, Item.external_id == session_id).order_by(Item.created_at.desc())
    ).first()
    if item is None:
        raise NotFound(f"no session {session_id}")
    return item


def _current_items() -> Any:
    """Subquery: each session's current item (its newest version; sessions are versioned by content)."""
    return (
        select(
            Item.id.label("item_id"),
            Item.external_id.label("sid"),
            func.row_number()
            .over(partition_by=Item.external_id, order_by=(Item.created_at.desc(), Item.id.desc()))
            .label("rn"),
        )
        .where(Item.kind == SESSION_KIND)
        .subquery()
    )


def _latest_session_scores(*conditions: Any, by: Any = None) -> Any:
    """Subquery: each session's latest score over all its versions (``conditions`` narrow the scores;
    ``by``: the time that orders them, created_at unless given)."""
    return (
        select(
            Score.id.label("score_id"),
            Item.external_id.label("sid"),
            func.row_number()
            .over(partition_by=Item.external_id, order_by=((by if by is not None else Score.created_at).desc(), Score.id.desc()))
            .label("rn"),
        )
        .join(Item, Item.id == Score.item_id)
        .where(Item.kind == SESSION_KIND, machine_scores(), *conditions)
        .subquery()
    )


def session_scores(session: Session, session_id: str) -> list[Score]:
    """Every score of a session, over all its stored versions, newest first."""
    ids = select(Item.id).where(Item.kind == SESSION_KIND, Item.external_id == session_id)
    return list(
        session.scalars(
            select(Score)
            .where(Score.item_id.in_(ids), machine_scores())
            .options(selectinload(Score.components))
            .order_by(Score.created_at.desc(), Score.id.desc())
        )
    )


SESSION_FILTERS = ("all", "scored", "not_scored", "scoring_failed", "scoring")


@dataclass
class SessionRow:
    item: Item
    score: Score | None
    current_hash: str | None

    @property
    def session_id(self) -> str:
        return self.item.external_id or str(self.item.id)

    @property
    def value(self) -> int | None:
        if self.score is None or self.score.status != "completed":
            return None
        return score100(self.score.total)

    @property
    def state(self) -> str:
        """not_scored, scoring (pending / in progress), scored, scoring_failed."""
        if self.score is None or self.score.status == "cancelled":
            return "not_scored"
        if self.score.status in ACTIVE:
            return "scoring"
        if self.score.status == "completed":
            return "scored"
        return "scoring_failed"

    @property
    def is_current(self) -> bool | None:
        if self.score is None or self.current_hash is None:
            return None
        return self.score.criteria_hash == self.current_hash


def list_sessions(
    session: Session, *, state: str = "all", min_score: int | None = None, sort: str = "newest", limit: int = 50, offset: int = 0
) -> tuple[list[SessionRow], int]:
    """Alert sessions with their latest score, filtered by scoring state and minimum score."""
    current = _current_items()
    latest = _latest_session_scores()
    joined = (
        select(Item, Score)
        .join(current, and_(current.c.item_id == Item.id, current.c.rn == 1))
        .outerjoin(latest, and_(latest.c.sid == current.c.sid, latest.c.rn == 1))
        .outerjoin(Score, Score.id == latest.c.score_id)
    )
    if state == "scored":
        joined = joined.where(Score.status == "completed")
    elif state == "not_scored":
        joined = joined.where(or_(Score.id.is_(None), Score.status == "cancelled"))
    elif state == "scoring_failed":
        joined = joined.where(Score.status.in_(FINISHED_BAD))
    elif state == "scoring":
        joined = joined.where(Score.status.in_(ACTIVE))
    if min_score is not None:
        joined = joined.where(Score.status == "completed", Score.total >= (min_score - 0.5) / 100.0)
    total = session.scalar(select(func.count()).select_from(joined.subquery())) or 0
    if sort == "score_desc":
        order = (Score.total.desc().nulls_last(), Item.created_at.desc())
    elif sort == "score_asc":
        order = (Score.total.asc().nulls_last(), Item.created_at.desc())
    else:
        order = (Item.created_at.desc(),)
    rows = session.execute(
        joined.options(selectinload(Score.components)).order_by(*order).limit(limit).offset(offset)
    ).all()
    current = current_hashes(session)
    return [SessionRow(item, score, current.get(score.suite_name) if score else None) for item, score in rows], total


# --- missing tools ----------------------------------------------------------------------------------------


def normalise_tool(name: str) -> str:
    """Design 001 analytics: case, ``-``/``_``/spaces folded (``List_Files`` = ``list-files``)."""
    return re.sub(r"[\s_\-]+", "-", name.strip().lower()).strip("-")


@dataclass
class ToolCount:
    tool: str
    count: int
    sessions: int
    names: list[str]
    example: str | None


def missing_tools(session: Session, *, criteria_hash: str | None = None, limit: int = 50) -> tuple[list[ToolCount], int]:
    """How often each missing tool is named (scores naming it; sessions), over each session's latest
    completed score, optionally only under one criteria hash: the rule of ``GET
    /api/v1/scoring/missing-tools``. Returns (counts, scores looked at)."""
    conditions = [Score.status == "completed"] + ([Score.criteria_hash == criteria_hash] if criteria_hash else [])
    ranked = _latest_session_scores(*conditions, by=Score.completed_at)
    latest_ids = select(ranked.c.score_id).where(ranked.c.rn == 1)
    counts: Counter[str] = Counter()
    sessions: dict[str, set[str]] = defaultdict(set)
    names: dict[str, Counter[str]] = defaultdict(Counter)
    example: dict[str, str] = {}
    looked = 0
    for score in session.scalars(
        select(Score).where(Score.id.in_(latest_ids)).options(selectinload(Score.components), selectinload(Score.item))
    ):
        looked += 1
        named: set[str] = set()  # a tool named twice in one verdict counts once
        tools = [tool for view in judge_views(score) for tool in view.missing_tools]
        for tool in tools:
            raw = str(tool.get("tool_name") or "").strip()
            key = normalise_tool(raw)
            if not key:
                continue
            if key not in named:
                counts[key] += 1
                named.add(key)
            sessions[key].add(score.item.external_id if score.item is not None else str(score.item_id))
            names[key][raw] += 1
            if key not in example and tool.get("rationale"):
                example[key] = str(tool["rationale"])
    out = [
        ToolCount(key, n, len(sessions[key]), [name for name, _ in names[key].most_common()], example.get(key))
        for key, n in counts.most_common(limit)
    ]
    return out, looked


# --- agreement --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelledSuite:
    """A suite with human labels. Attributes, not dict keys: a template's ``s.items`` on a dict is the
    dict's ``items`` method, not the count."""

    name: str
    labelled_items: int
    labels: int


def labelled_suites(session: Session) -> list[LabelledSuite]:
    """Every suite that has human labels, by name: how many distinct items are labelled, how many labels."""
    rows = session.execute(
        select(Label.suite_name, func.count(func.distinct(Label.item_id)), func.count())
        .group_by(Label.suite_name)
        .order_by(Label.suite_name)
    ).all()
    return [LabelledSuite(name, items, labels) for name, items, labels in rows]


# --- criteria ---------------------------------------------------------------------------------------------


@dataclass
class CriteriaRow:
    criteria_hash: str
    kind: str | None
    created_at: Any
    current_for: list[str]
    suites_seen: list[str]
    scores: int
    latest_scores: int


@dataclass
class SuiteFreshness:
    suite: str
    current_hash: str
    current: int
    stale: int


@dataclass
class SuiteComponents:
    """A suite's current criteria, for the criteria page's list of components."""

    suite: str
    origin: str
    state: str
    criteria_hash: str
    criteria: Criteria


def suite_components(session: Session) -> list[SuiteComponents]:
    """Every registered suite with its current criteria: each component's metric and args, or its
    judge (rubric text, per-item template, verdict type)."""
    return [
        SuiteComponents(s.name, s.origin, s.state, s.current_criteria_hash, load_criteria(session, s.current_criteria_hash))
        for s in session.scalars(select(SuiteRecord).order_by(SuiteRecord.name))
    ]


def criteria_overview(session: Session) -> tuple[list[CriteriaRow], list[SuiteFreshness]]:
    """Every criteria definition with its score counts, and per suite how many items' latest score is
    under the suite's current criteria (current) or an older one (stale)."""
    current = current_hashes(session)
    current_for: dict[str, list[str]] = defaultdict(list)
    for suite, h in sorted(current.items()):
        current_for[h].append(suite)
    per_hash = dict(
        session.execute(select(Score.criteria_hash, func.count()).where(machine_scores()).group_by(Score.criteria_hash)).all()
    )
    ranked = (
        select(
            Score.criteria_hash.label("h"),
            Score.suite_name.label("suite"),
            func.row_number()
            .over(partition_by=(Score.item_id, Score.suite_name), order_by=(Score.created_at.desc(), Score.id.desc()))
            .label("rn"),
        )
        .where(Score.status != "cancelled", machine_scores())
        .subquery()
    )
    latest = session.execute(
        select(ranked.c.h, ranked.c.suite, func.count()).where(ranked.c.rn == 1).group_by(ranked.c.h, ranked.c.suite)
    ).all()
    latest_per_hash: Counter[str] = Counter()
    suites_seen: dict[str, set[str]] = defaultdict(set)
    fresh: dict[str, list[int]] = {suite: [0, 0] for suite in current}
    for h, suite, n in latest:
        latest_per_hash[h] += n
        suites_seen[h].add(suite)
        if suite in fresh:
            fresh[suite][0 if current[suite] == h else 1] += n
    rows = []
    for d in session.scalars(select(CriteriaDefinition).order_by(CriteriaDefinition.created_at.desc())):
        rows.append(
            CriteriaRow(
                criteria_hash=d.criteria_hash,
                kind=(d.criteria_content or {}).get("kind"),
                created_at=d.created_at,
                current_for=current_for.get(d.criteria_hash, []),
                suites_seen=sorted(suites_seen.get(d.criteria_hash, set())),
                scores=int(per_hash.get(d.criteria_hash, 0)),
                latest_scores=latest_per_hash.get(d.criteria_hash, 0),
            )
        )
    suites = [SuiteFreshness(s, current[s], c, st) for s, (c, st) in sorted(fresh.items())]
    return rows, suites
