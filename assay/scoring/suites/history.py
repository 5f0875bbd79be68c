"""A suite's criteria versions (``assay suite show``, ``assay diff --versions``), and what changed between two.

An API suite's versions are those registered through the API (``api_suites``), numbered 1, 2, … as
they were posted. A file suite (or one run by path) has no registered versions: its versions are the
criteria hashes its batches were scored under, numbered by first use, then its current hash when no
batch used it yet. Either way version N names one criteria hash, so two versions can be diffed.
"""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from assay.scoring.errors import NotFound
from assay.scoring.store.models import Batch, CriteriaDefinition, SuiteRecord, SuiteVersion
from assay.scoring.suites.criteria import load_criteria


def _record(session: Session, name: str) -> SuiteRecord:
    record = session.get(SuiteRecord, name)
    if record is None:
        known = session.scalars(select(SuiteRecord.name).order_by(SuiteRecord.name)).all()
        raise NotFound(f"no suite named {name!r}; known: {', '.join(known) or 'none'}")
    return record


def criteria_versions(session: Session, name: str) -> dict[str, Any]:
    """The suite's criteria versions, oldest first: number, criteria hash, since when, batches scored."""
    record = _record(session, name)
    used = {
        h: (first, count)
        for h, first, count in session.execute(
            select(Batch.criteria_hash, func.min(Batch.created_at), func.count())
            .where(Batch.suite_name == name)
            .group_by(Batch.criteria_hash)
        )
    }
    rows: list[tuple[str, datetime | None]]
    if record.origin == "api":
        versions = session.scalars(select(SuiteVersion).where(SuiteVersion.suite_name == name).order_by(SuiteVersion.version))
        rows = [(v.criteria_hash, v.created_at) for v in versions]
        source = "registered through the API"
    else:
        rows = sorted(((h, first) for h, (first, _) in used.items()), key=lambda r: (r[1] is None, r[1], r[0]))
        if record.current_criteria_hash not in used:
            created = session.get(CriteriaDefinition, record.current_criteria_hash)
            rows.append((record.current_criteria_hash, created.created_at if created else None))
        source = "the criteria hashes its batches were scored under, by first use"
    return {
        "name": name,
        "kind": record.kind,
        "origin": record.origin,
        "current_criteria_hash": record.current_criteria_hash,
        "numbered": source,
        "versions": [
            {
                "version": number,
                "criteria_hash": criteria_hash,
                "since": since,
                "batches": used.get(criteria_hash, (None, 0))[1],
                "current": criteria_hash == record.current_criteria_hash,
            }
            for number, (criteria_hash, since) in enumerate(rows, 1)
        ],
    }


def version_hash(session: Session, name: str, version: int) -> str:
    """The criteria hash of the suite's version ``version``; NotFound naming the versions there are."""
    versions = criteria_versions(session, name)["versions"]
    if not 1 <= version <= len(versions):
        raise NotFound(f"suite {name!r} has no version {version}; it has {len(versions)} (1-{len(versions)})")
    return str(versions[version - 1]["criteria_hash"])


def criteria_version(session: Session, name: str, version: int | None) -> dict[str, Any]:
    """One version (default: the current one) with its resolved criteria."""
    history = criteria_versions(session, name)
    if version is None:
        chosen = next((v for v in reversed(history["versions"]) if v["current"]), None)
        if chosen is None:
            raise NotFound(f"suite {name!r} has no current criteria among its versions")
    else:
        version_hash(session, name, version)  # NotFound when there is no such version
        chosen = history["versions"][version - 1]
    criteria = load_criteria(session, chosen["criteria_hash"])
    return {"name": name, **chosen, "criteria": criteria.model_dump(mode="json")}


# --- what changed -------------------------------------------------------------------------------------


def criteria_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What changed from ``old`` to ``new`` (stored criteria, their JSON form), as a reader needs it
    beside the score deltas: the threshold, components added and removed, weights and pass blockers,
    metric versions and arguments, each judge's provider, model and settings, and the rubric and prompt
    texts as unified diffs."""
    old_components, new_components = old.get("components") or {}, new.get("components") or {}
    threshold = old.get("threshold"), new.get("threshold")
    changes: dict[str, Any] = {
        "threshold": None if threshold[0] == threshold[1] else {"from": threshold[0], "to": threshold[1]},
        "components_added": [n for n in new_components if n not in old_components],
        "components_removed": [n for n in old_components if n not in new_components],
        "fields": None if old.get("fields") == new.get("fields") else {"from": old.get("fields"), "to": new.get("fields")},
        "components": [],
    }
    for name in (n for n in new_components if n in old_components):
        changed = _component_changes(_judged(old, name), _judged(new, name))
        if changed:
            changes["components"].append({"component": name, "changes": changed})
    changes["changed"] = any(
        changes[k] for k in ("threshold", "components_added", "components_removed", "fields", "components")
    )
    return changes


# A component's settings compared one by one, and its judge's; the judge's texts are diffed apart.
_SETTINGS = ("weight", "min_score", "metric", "version", "args")
_JUDGE_SETTINGS = ("provider", "model", "max_tokens", "temperature", "seed", "reasoning_effort", "verdict")
_JUDGE_TEXTS = ("rubric", "prompt")


def _judged(criteria: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A component's settings, and its judge's (a rubric judge, or the suite's judge section for
    ``judge: true``; empty for a metric)."""
    spec = criteria["components"][name]
    judge = spec.get("judge")
    if isinstance(judge, dict):
        return spec, judge
    return spec, (criteria.get("judge") or {}) if judge is True else {}


def _component_changes(old: tuple[dict[str, Any], dict[str, Any]], new: tuple[dict[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    (a, a_judge), (b, b_judge) = old, new
    changes = [{"what": w, "from": a.get(w), "to": b.get(w)} for w in _SETTINGS if a.get(w) != b.get(w)]
    changes += [
        {"what": f"judge.{w}", "from": a_judge.get(w), "to": b_judge.get(w)}
        for w in _JUDGE_SETTINGS
        if a_judge.get(w) != b_judge.get(w)
    ]
    for what in _JUDGE_TEXTS:
        before, after = a_judge.get(what) or "", b_judge.get(what) or ""
        if before != after:
            lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"{what} (from)", f"{what} (to)", lineterm="")
            changes.append({"what": f"judge.{what}", "diff": "\n".join(lines)})
    return changes
