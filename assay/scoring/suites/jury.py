"""Juries: a rubric judge component answered by several judges, aggregated into one score.

::

    components:
      correctness:
        weight: 1
        judge:
          rubric: Is the answer correct?
          verdict: {type: pass_fail}
          judges:                              # two or more members, each its own judge call
            - {provider: anthropic, model: claude-haiku-4-5}
            - {provider: openai, model: gpt-5-mini, weight: 2}
            - {provider: local, model: "qwen3:8b", name: qwen}
          aggregate: majority                  # mean | median (numeric verdicts), majority (pass_fail, labels)
          min_members: 2                       # the quorum; default: a majority of the members

Every member gets the same rubric, prompt, verdict and ``max_tokens``; its own provider, model,
request parameters and weight (default 1). A member's name (default: its model) names its row of a
score, ``correctness@claude-haiku-4-5``: a unit of work like any judge component (lease, breaker and
governor of its provider, retries, repair, exactly-once landing, cost, carry-over by the member's own
fingerprint, the batch lane). When every member has landed, the component itself lands with the
aggregate of the members that answered (``aggregate``); below the quorum it is skipped with the
reason. Membership and aggregation are criteria (hashed); a member's weight is too.

Aggregates (each weighted by the members' weights):

- ``mean``: the weighted mean of the members' scores;
- ``median``: the weighted median: the score where the members' cumulative weight, lowest score
  first, first reaches half the total; exactly half falls between two scores, which are averaged
  (with equal weights, the ordinary median);
- ``majority``: the verdict (``passed`` or ``label``) with the most weight; a tie goes to the tied
  verdict that scores lowest (fail before pass: a pass needs evidence), then to the label listed first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.rubrics import VerdictSpec
from assay.scoring.suites.catalog import ModelCatalog
from assay.scoring.suites.providers import REFUSED_PARAMETERS, JudgeParameters

Aggregate = Literal["mean", "median", "majority"]
# Which aggregates each verdict type takes.
AGGREGATES: dict[str, tuple[str, ...]] = {
    "score": ("mean", "median"),
    "scale": ("mean", "median"),
    "criteria": ("mean", "median"),
    "pass_fail": ("majority",),
    "labels": ("majority",),
}
SEPARATOR = "@"
# A score's component column is 64 characters: a member's row, ``component@member``, must fit.
ROW_NAME_LIMIT = 64
MEMBER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,62}")
MEMBER_NAME_RULE = "letters, digits, '_', '.', ':', '/' or '-', starting with a letter or digit"


class JuryMember(JudgeParameters):
    """One judge of a jury, resolved (hashed)."""

    name: str
    provider: str
    model: str
    weight: float = Field(1.0, gt=0, le=1000)


class JuryJudge(BaseModel):
    """A jury judge component, resolved: the shared rubric and verdict, its members and aggregation."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(..., gt=0, le=64_000)
    rubric: str = Field(..., min_length=1)
    prompt: str = Field(..., min_length=1)
    verdict: VerdictSpec
    template: str = Field(..., min_length=1)
    verdict_schema: dict[str, Any]
    judges: list[JuryMember] = Field(..., min_length=2)
    aggregate: Aggregate
    min_members: int = Field(..., ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> JuryJudge:
        fits = AGGREGATES[self.verdict.type]
        if self.aggregate not in fits:
            raise ValueError(
                f"aggregate {self.aggregate!r} does not fit a {self.verdict.type} verdict; use "
                f"{' or '.join(fits)}"
            )
        names = [member.name for member in self.judges]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"two members are named {', '.join(repeated)}; give each a distinct name (name: ...)"
            )
        seen: dict[tuple[str, str, str], str] = {}
        for member in self.judges:
            key = (member.provider, member.model, repr(sorted(member.parameters.items())))
            if key in seen:
                raise ValueError(
                    f"members {seen[key]!r} and {member.name!r} are the same judge ({member.provider} "
                    f"{member.model}); a jury's members must differ"
                )
            seen[key] = member.name
        if self.min_members > len(self.judges):
            raise ValueError(
                f"min_members is {self.min_members}, but the jury has only {len(self.judges)} members"
            )
        return self

    def member(self, name: str) -> JuryMember | None:
        return next((member for member in self.judges if member.name == name), None)


def member_row(component: str, member: str) -> str:
    """The name of a member's row in a score."""
    return f"{component}{SEPARATOR}{member}"


# --- the suite file ----------------------------------------------------------------------------------


class _MemberFile(JudgeParameters):
    provider: str
    model: str = ""
    name: str | None = None
    weight: float = Field(1.0, gt=0, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _no_sampling(cls, data: Any) -> Any:
        refused = sorted(REFUSED_PARAMETERS & set(data)) if isinstance(data, dict) else []
        if refused:
            raise ValueError(f"{', '.join(refused)}: the judge sends no such parameter; remove the key")
        return data


def default_quorum(members: int) -> int:
    """A majority of the members."""
    return members // 2 + 1


def resolve_jury(
    component: str,
    written: Mapping[str, Any],
    *,
    rubric: str,
    prompt: str,
    template: str,
    verdict: VerdictSpec,
    verdict_schema: dict[str, Any],
    max_tokens: int,
    catalog: ModelCatalog,
) -> JuryJudge:
    """A rubric judge's ``judges:``, ``aggregate:`` and ``min_members:`` as written, resolved against
    the model catalog. ``written``: those keys, plus any single-judge key the rubric also set (refused:
    a jury names its providers and models under ``judges:``). Raises ``CriteriaError`` in plain words."""
    where = f"components.{component}.judge"
    single = sorted(key for key in ("provider", "model", "temperature", "seed", "reasoning_effort") if key in written)
    if single:
        raise CriteriaError(
            f"{where}: {', '.join(single)}: a jury sets these per member, under judges:; remove "
            f"{'it' if len(single) == 1 else 'them'} here"
        )
    raw = written.get("judges")
    if not isinstance(raw, list) or len(raw) < 2:
        raise CriteriaError(f"{where}.judges: a jury is a list of at least two members, each {{provider, model}}")
    aggregate = written.get("aggregate")
    if aggregate is None:
        raise CriteriaError(
            f"{where}: a jury needs aggregate: ({' or '.join(AGGREGATES[verdict.type])} for a {verdict.type} verdict)"
        )
    members = []
    for index, entry in enumerate(raw):
        try:
            member = _MemberFile.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise CriteriaError(f"{where}.judges.{index}{'.' + loc if loc else ''}: {first['msg']}") from None
        try:
            model = catalog.resolve(member.provider, member.model)
            catalog.check_parameters(member.provider, model, member.parameters)
        except CriteriaError as exc:
            raise CriteriaError(f"{where}.judges.{index}: {exc.message}") from None
        name = member.name if member.name is not None else model
        if not MEMBER_NAME.fullmatch(name):
            raise CriteriaError(
                f"{where}.judges.{index}: member name {name!r} must be {MEMBER_NAME_RULE}"
                + ("" if member.name is not None else " (it defaults to the model; give it a name: ...)")
            )
        if len(member_row(component, name)) > ROW_NAME_LIMIT:
            raise CriteriaError(
                f"{where}.judges.{index}: {member_row(component, name)!r} is longer than {ROW_NAME_LIMIT} "
                "characters; give the member a shorter name: ..."
            )
        members.append(
            JuryMember(**member.parameters, name=name, provider=member.provider, model=model, weight=member.weight)
        )
    quorum = written.get("min_members", default_quorum(len(members)))
    try:
        return JuryJudge(
            max_tokens=max_tokens,
            rubric=rubric,
            prompt=prompt,
            verdict=verdict,
            template=template,
            verdict_schema=verdict_schema,
            judges=members,
            aggregate=aggregate,
            min_members=quorum,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise CriteriaError(f"{where}{'.' + loc if loc else ''}: {first['msg'].removeprefix('Value error, ')}") from None


# --- aggregation ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberOutcome:
    """A member's landed row: its status, score (0..1) and details (the verdict's fields)."""

    status: str
    score: float | None
    details: Mapping[str, Any] | None
    reason: str | None = None
    cost_usd: float = 0.0


@dataclass(frozen=True)
class JuryResult:
    """The component's result: ``score`` None means skipped, with ``reason``."""

    score: float | None
    details: dict[str, Any]
    reason: str | None = None


def verdict_value(verdict: VerdictSpec, details: Mapping[str, Any] | None, score: float | None) -> Any:
    """What a member answered, as its vote and agreement value: ``passed`` (pass_fail), the label
    (labels), the grade (scale) or the score (score, criteria)."""
    details = details or {}
    if verdict.type == "pass_fail":
        return details.get("passed")
    if verdict.type == "labels":
        return details.get("label")
    if verdict.type == "scale":
        return details.get("scale")
    return score


def weighted_median(values: list[tuple[float, float]]) -> float:
    """The weighted median of (value, weight) pairs (see the module's docstring)."""
    ordered = sorted(values)
    half = math.fsum(weight for _, weight in ordered) / 2
    cumulative = 0.0
    for index, (value, weight) in enumerate(ordered):
        cumulative += weight
        if math.isclose(cumulative, half, rel_tol=1e-12, abs_tol=1e-12) and index + 1 < len(ordered):
            return (value + ordered[index + 1][0]) / 2
        if cumulative > half:
            return value
    return ordered[-1][0]


def _majority(jury: JuryJudge, votes: list[tuple[Any, float]]) -> tuple[Any, float, dict[str, float]]:
    """The winning verdict, its score, and the weight each verdict got."""
    tally: dict[Any, float] = {}
    for value, weight in votes:
        tally[value] = tally.get(value, 0.0) + weight
    top = max(tally.values())
    tied = [value for value, weight in tally.items() if math.isclose(weight, top, rel_tol=1e-12)]
    if jury.verdict.type == "pass_fail":
        winner = min(tied, key=lambda passed: 1.0 if passed else 0.0)
        return winner, 1.0 if winner else 0.0, {str(bool(k)).lower(): v for k, v in tally.items()}
    labels = dict(jury.verdict.labels or {})
    order = list(labels)
    winner = min(tied, key=lambda label: (labels[label], order.index(label)))
    return winner, labels[winner], {str(k): v for k, v in tally.items()}


def aggregate(component: str, jury: JuryJudge, outcomes: Mapping[str, MemberOutcome]) -> JuryResult:
    """The jury's result from its members' landed rows (by member name)."""
    answered = {
        member.name: outcomes[member.name]
        for member in jury.judges
        if member.name in outcomes and outcomes[member.name].status == "ok" and outcomes[member.name].score is not None
    }
    members: dict[str, Any] = {}
    for member in jury.judges:
        outcome = outcomes.get(member.name)
        entry: dict[str, Any] = {"provider": member.provider, "model": member.model, "weight": member.weight}
        if outcome is not None:
            entry |= {"status": outcome.status, "score": outcome.score, "cost_usd": outcome.cost_usd}
            if outcome.status == "ok":
                entry["verdict"] = verdict_value(jury.verdict, outcome.details, outcome.score)
                entry["reasoning"] = (outcome.details or {}).get("reasoning")
            else:
                entry["reason"] = outcome.reason
        members[member.name] = entry
    details: dict[str, Any] = {
        "jury": {
            "aggregate": jury.aggregate,
            "min_members": jury.min_members,
            "answered": len(answered),
            "members": members,
        }
    }
    if len(answered) < jury.min_members:
        missing = "; ".join(
            f"{name}: {entry.get('status', 'missing')} ({entry.get('reason') or 'no verdict'})"
            for name, entry in members.items()
            if name not in answered
        )
        return JuryResult(
            None,
            details,
            f"jury: {len(answered)} of {len(jury.judges)} members answered, fewer than min_members "
            f"{jury.min_members} ({missing})",
        )
    weights = {member.name: member.weight for member in jury.judges}
    if jury.aggregate == "majority":
        votes = [(verdict_value(jury.verdict, o.details, o.score), weights[name]) for name, o in answered.items()]
        winner, score, tally = _majority(jury, votes)
        details["jury"]["votes"] = tally
        details["passed" if jury.verdict.type == "pass_fail" else "label"] = winner
    elif jury.aggregate == "mean":
        total = math.fsum(weights[name] for name in answered)
        score = math.fsum((o.score or 0.0) * weights[name] for name, o in answered.items()) / total
    else:
        score = weighted_median([(o.score or 0.0, weights[name]) for name, o in answered.items()])
    details["reasoning"] = f"{jury.aggregate} of {len(answered)} of {len(jury.judges)} members"
    return JuryResult(min(1.0, max(0.0, score)), details)
