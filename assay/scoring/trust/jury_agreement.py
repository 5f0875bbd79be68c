"""Inter-judge agreement of a suite's juries, per jury component and criteria hash.

For each criteria hash with a jury, over each item's latest completed machine score under it (calibration
repeats left out), each member's verdict (:func:`assay.scoring.suites.jury.verdict_value`) where it
landed ok:

- Krippendorff's alpha over all members, at the verdict type's level of measurement: nominal for
  ``pass_fail`` and ``labels``, ordinal for ``scale``, interval for ``score`` and ``criteria``
  (the ``krippendorff`` library; None, with the reason, when it is undefined);
- for each pair of members, over the items both answered: the share of equal verdicts, and Cohen's
  kappa (``pass_fail``, ``labels``) or quadratic-weighted kappa (``scale``); for ``score`` and
  ``criteria``, the pair's interval alpha and mean absolute difference instead;
- each member's agreement with people, where the suite has human labels (the statistics of
  :mod:`assay.scoring.trust.agreement`, computed for each member's row as for a judge component).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import krippendorff
import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.errors import NotFound
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import (
    CriteriaDefinition,
    Score,
    ScoreComponent,
    SuiteRecord,
)
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.jury import JuryJudge, member_row, verdict_value
from assay.scoring.suites.loader import Criteria
from assay.scoring.trust import agreement

# The level of measurement of each verdict type (Krippendorff's alpha).
LEVELS = {"pass_fail": "nominal", "labels": "nominal", "scale": "ordinal", "score": "interval", "criteria": "interval"}


def categories(jury: JuryJudge) -> list[Any] | None:
    """The ordered values a nominal or ordinal verdict takes (None: interval)."""
    verdict = jury.verdict
    if verdict.type == "pass_fail":
        return [False, True]
    if verdict.type == "labels":
        return list(verdict.labels or {})
    if verdict.type == "scale":
        assert verdict.min is not None and verdict.max is not None
        return list(range(verdict.min, verdict.max + 1))
    return None


def kappa(a: Sequence[Any], b: Sequence[Any], values: Sequence[Any], *, quadratic: bool = False) -> float | None:
    """Cohen's kappa of two raters over the same items (quadratic-weighted: disagreements weigh the
    squared distance between the categories, ``values`` in order). None when undefined (both raters
    gave one and the same category throughout, so no disagreement was possible by chance)."""
    index = {value: i for i, value in enumerate(values)}
    k = len(values)
    observed = np.zeros((k, k))
    for x, y in zip(a, b, strict=True):
        observed[index[x], index[y]] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    i, j = np.indices((k, k))
    weights = ((i - j) / (k - 1)) ** 2 if quadratic else (i != j).astype(float)
    chance = float((weights * expected).sum())
    if chance <= 1e-15:
        return None
    return 1.0 - float((weights * observed).sum()) / chance


def alpha(matrix: list[list[float]], level: str, domain: Sequence[float] | None) -> tuple[float | None, str | None]:
    """Krippendorff's alpha of a raters x items matrix (NaN: no value), or None with the reason."""
    data = np.array(matrix, dtype=float)
    pairable = int((np.sum(~np.isnan(data), axis=0) >= 2).sum()) if data.size else 0
    if pairable == 0:
        return None, "no item has verdicts from two members"
    values = np.unique(data[~np.isnan(data)])
    if len(values) < 2:
        return None, "every verdict is the same: alpha is undefined"
    with np.errstate(invalid="ignore", divide="ignore"):
        value = krippendorff.alpha(
            reliability_data=data, level_of_measurement=level, value_domain=list(domain) if domain else None
        )
    if not math.isfinite(value):
        return None, "no disagreement is possible within the items both members answered: alpha is undefined"
    return float(value), None


def _latest_scores(session: Session, suite: str, criteria_hash: str) -> list[Any]:
    """Each item's latest completed machine score under the hash."""
    rows = session.execute(
        select(Score.id, Score.item_id)
        .where(Score.suite_name == suite, Score.criteria_hash == criteria_hash, Score.status == "completed", machine_scores())
        .order_by(Score.item_id, Score.completed_at.desc(), Score.created_at.desc())
    ).all()
    latest: dict[Any, Any] = {}
    for score_id, item_id in rows:
        latest.setdefault(item_id, score_id)
    return list(latest.values())


def _member_values(session: Session, score_ids: list[Any], component: str, jury: JuryJudge) -> dict[str, dict[Any, Any]]:
    """Member name -> score id -> its verdict, where it landed ok."""
    rows = {member_row(component, m.name): m.name for m in jury.judges}
    found: dict[str, dict[Any, Any]] = {m.name: {} for m in jury.judges}
    for start in range(0, len(score_ids), 1000):
        for score_id, row, score, details in session.execute(
            select(ScoreComponent.score_id, ScoreComponent.component, ScoreComponent.score, ScoreComponent.details).where(
                ScoreComponent.score_id.in_(score_ids[start : start + 1000]),
                ScoreComponent.component.in_(list(rows)),
                ScoreComponent.status == "ok",
            )
        ):
            value = verdict_value(jury.verdict, details, score)
            if value is not None:
                found[rows[row]][score_id] = value
    return found


def _pair(jury: JuryJudge, a: dict[Any, Any], b: dict[Any, Any]) -> dict[str, Any]:
    shared = sorted(set(a) & set(b), key=str)
    x, y = [a[s] for s in shared], [b[s] for s in shared]
    out: dict[str, Any] = {"items": len(shared), "equal": (sum(p == q for p, q in zip(x, y, strict=True)) / len(shared)) if shared else None}
    values = categories(jury)
    if values is not None:
        quadratic = jury.verdict.type == "scale"
        out["statistic"] = "quadratic_weighted_kappa" if quadratic else "cohen_kappa"
        out["kappa"] = kappa(x, y, values, quadratic=quadratic) if shared else None
    else:
        out["statistic"] = "interval_alpha"
        out["alpha"] = alpha([x, y], "interval", None)[0] if shared else None
        out["mean_abs_difference"] = (math.fsum(abs(p - q) for p, q in zip(x, y, strict=True)) / len(shared)) if shared else None
    return out


def component_agreement(
    jury: JuryJudge, values: dict[str, dict[Any, Any]], score_ids: list[Any]
) -> dict[str, Any]:
    """Alpha, pairwise agreement and each member's count, from each member's verdicts by score."""
    level = LEVELS[jury.verdict.type]
    ordered = categories(jury)
    code = {value: i for i, value in enumerate(ordered)} if ordered is not None else None
    matrix = [
        [
            float(code[values[m.name][s]] if code is not None else values[m.name][s]) if s in values[m.name] else math.nan
            for s in score_ids
        ]
        for m in jury.judges
    ]
    value, reason = alpha(matrix, level, list(range(len(ordered))) if ordered is not None else None)
    return {
        "verdict": jury.verdict.type,
        "aggregate": jury.aggregate,
        "level": level,
        "items": len(score_ids),
        "alpha": value,
        "alpha_reason": reason,
        "members": {
            m.name: {"provider": m.provider, "model": m.model, "weight": m.weight, "answered": len(values[m.name])}
            for m in jury.judges
        },
        "pairs": [
            {"a": a.name, "b": b.name, **_pair(jury, values[a.name], values[b.name])}
            for a, b in itertools.combinations(jury.judges, 2)
        ],
    }


def _juries(criteria: Criteria) -> dict[str, JuryJudge]:
    return {name: spec.jury for name, spec in sorted(criteria.components.items()) if spec.jury is not None}


def hash_jury_agreement(session: Session, suite: str, criteria_hash: str, labels: Any) -> dict[str, Any]:
    criteria = load_criteria(session, criteria_hash)
    score_ids = _latest_scores(session, suite, criteria_hash)
    people = (
        agreement.hash_agreement(session, suite, criteria_hash, labels, limit=0)["components"] if labels else {}
    )
    components = {}
    for name, jury in _juries(criteria).items():
        report = component_agreement(jury, _member_values(session, score_ids, name, jury), score_ids)
        if people:
            report["with_people"] = {
                row: people.get(row) for row in (name, *(member_row(name, m.name) for m in jury.judges))
            }
        components[name] = report
    return {"criteria_hash": criteria_hash, "components": components}


def suite_jury_agreement(session: Session, suite: str, criteria_hash: str | None = None) -> dict[str, Any]:
    """The jury agreement report of a suite: one hash, or every hash with a jury and a completed score."""
    record = session.get(SuiteRecord, suite)
    if record is None:
        known = session.scalars(select(SuiteRecord.name).order_by(SuiteRecord.name)).all()
        raise NotFound(f"no suite named {suite!r}; available: {', '.join(known) or 'none'}")
    if criteria_hash is not None:
        if session.get(CriteriaDefinition, criteria_hash) is None:
            raise NotFound(f"no criteria with hash {criteria_hash}")
        hashes = [criteria_hash]
    else:
        scored = select(Score.criteria_hash).where(Score.suite_name == suite, Score.status == "completed").distinct()
        hashes = list(
            session.scalars(
                select(CriteriaDefinition.criteria_hash)
                .where(CriteriaDefinition.criteria_hash.in_(scored))
                .order_by(CriteriaDefinition.created_at.desc(), CriteriaDefinition.criteria_hash)
            )
        )
        hashes = [h for h in hashes if _juries(load_criteria(session, h))]
    labels = agreement.suite_labels(session, suite)
    return {
        "suite": suite,
        "current_criteria_hash": record.current_criteria_hash,
        "labelled_items": len(labels),
        "hashes": [hash_jury_agreement(session, suite, h, labels) for h in hashes],
    }
