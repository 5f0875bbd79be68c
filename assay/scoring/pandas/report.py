"""Design 002's output files, from stored scores: ``metrics.json`` (one entry per item) and
``metrics_summary.json`` (the batch), plus the kind's report columns for CSV / JSONL exports.

A ``metrics.json`` entry carries the design's blocks, each with its score and ``details``::

    {"item_id", "external_id", "position", "question", "timestamp", "overall_score", "passed", ...,
     "prompt_understanding": {"understanding_score", "details": {...}},
     "requirement_coverage": {"coverage_score", "details": {...}},
     "error_recovery": {"has_error", "error_message", "recovery_attempts_count", "recovery_success",
                        "recovery_success_rate", "error_fix_quality", "recovery_score", "recovery_details"},
     "correctness": {"correctness_score", "details"}, "code_quality": {"quality_score", "details"},
     "performance": {"performance_score", "details"}}

A component that was skipped or failed has its score ``null`` and ``status`` / ``reason`` say why.
An item whose generated code ran without error says ``"has_error": false`` and has no recovery
score (``null``), rather than a made-up one.

``metrics_summary.json``::

    {"summary": {"average_understanding_score", "average_coverage_score", "average_recovery_score",
                 "errors_encountered", "total_recovery_attempts", "successful_recoveries",
                 "recovery_success_rate", ...}}

``errors_encountered`` counts items whose generated code raised; ``successful_recoveries`` the
items among them that a recovery attempt fixed (its result correct); ``recovery_success_rate`` is
their ratio, so it is always within [0, 1] (0.0 when no item had an error; ``items_with_errors``
then says 0). Averages are over the items where the component has a score (``null`` when none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

# Block name in metrics.json -> (component name in the shipped suite, score field).
BLOCKS: dict[str, tuple[str, str]] = {
    "prompt_understanding": ("prompt_understanding", "understanding_score"),
    "requirement_coverage": ("requirement_coverage", "coverage_score"),
    "error_recovery": ("error_recovery", "recovery_score"),
    "correctness": ("correctness", "correctness_score"),
    "code_quality": ("code_quality", "quality_score"),
    "performance": ("performance", "performance_score"),
}
RECOVERY_FIELDS = (
    "has_error", "error_message", "recovery_attempts_count", "recovery_success", "recovery_success_rate",
    "error_fix_quality", "recovery_score", "recovery_details",
)
REPORT_COLUMNS = (
    "Total Score", "Score Status", "Correctness Score", "Code Quality Score", "Performance Score",
    "Prompt Understanding Score", "Requirement Coverage Score", "Error Recovery Score", "Code Review Score",
    "Question", "Generated Code", "Execution Error", "Missing Requirements",
)


def _view_and_payload(score: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stored Score (components and item loaded), or an already built (view, payload) pair."""
    if isinstance(score, tuple):
        return score[0], score[1]
    from assay.scoring.reports.views import score_view

    view = score_view(score)
    view["external_id"] = score.item.external_id if score.item is not None else None
    return view, (score.item.payload if score.item is not None else {}) or {}


def metrics_entry(view: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """One ``metrics.json`` entry from a score view (:func:`assay.scoring.reports.views.score_view`) and
    the item's payload."""
    components: Mapping[str, Any] = view.get("components") or {}
    entry: dict[str, Any] = {
        "score_id": view.get("score_id"),
        "item_id": view.get("item_id"),
        "external_id": view.get("external_id", payload.get("id")),
        "position": view.get("position"),
        "question": payload.get("question"),
        "timestamp": view.get("completed_at") or view.get("created_at"),
        "status": view.get("status"),
        "overall_score": view.get("total_score"),
        "passed": view.get("passed"),
        "partial": view.get("partial"),
        "criteria_hash": view.get("criteria_hash"),
    }
    for block, (component, field) in BLOCKS.items():
        comp = components.get(component)
        if comp is None:
            entry[block] = None
            continue
        details = dict(comp.get("details") or {})
        score = comp.get("score") if comp.get("status") == "ok" else None
        if block == "error_recovery":
            recovery = {name: details.get(name) for name in RECOVERY_FIELDS}
            recovery["recovery_score"] = score
            if recovery["has_error"] is None and comp.get("status") == "ok":
                recovery["has_error"] = True
            recovery["recovery_attempts_count"] = recovery["recovery_attempts_count"] or 0
            recovery["recovery_details"] = recovery["recovery_details"] or []
            for extra in ("error_type", "error_category", "attempts_ignored", "max_recovery_attempts"):
                if extra in details:
                    recovery[extra] = details[extra]
            if comp.get("status") != "ok":
                recovery["status"] = comp.get("status")
                recovery["reason"] = comp.get("reason")
            if recovery["has_error"] is False:
                recovery["note"] = "no error: nothing to recover from (not counted in the recovery rate)"
            entry[block] = recovery
            continue
        block_value: dict[str, Any] = {field: score, "details": details}
        if comp.get("status") != "ok":
            block_value["status"] = comp.get("status")
            block_value["reason"] = comp.get("reason")
        entry[block] = block_value
    review = components.get("code_review")
    if review is not None:
        entry["code_review"] = {
            "review_score": review.get("score") if review.get("status") == "ok" else None,
            "details": review.get("details") or {},
            **({"status": review.get("status"), "reason": review.get("reason")} if review.get("status") != "ok" else {}),
        }
    return entry


def iter_entries(scores: Iterable[Any]) -> Iterator[dict[str, Any]]:
    for score in scores:
        view, payload = _view_and_payload(score)
        yield metrics_entry(view, payload)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _block_score(entry: Mapping[str, Any], block: str) -> float | None:
    value = entry.get(block)
    if not isinstance(value, Mapping):
        return None
    score = value.get(BLOCKS[block][1])
    return float(score) if isinstance(score, int | float) else None


def summarize(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``metrics_summary.json`` for the entries (see the module docstring)."""
    entries = list(entries)
    scores: dict[str, list[float]] = {block: [] for block in BLOCKS}
    overall: list[float] = []
    errors = attempts = recovered = with_errors = without_errors = unknown = 0
    passed = 0
    for entry in entries:
        for block in BLOCKS:
            value = _block_score(entry, block)
            if value is not None:
                scores[block].append(value)
        if isinstance(entry.get("overall_score"), int | float):
            overall.append(float(entry["overall_score"]))
        if entry.get("passed"):
            passed += 1
        recovery = entry.get("error_recovery")
        if not isinstance(recovery, Mapping) or recovery.get("has_error") is None:
            unknown += 1
            continue
        if recovery.get("has_error"):
            errors += 1
            with_errors += 1
            attempts += int(recovery.get("recovery_attempts_count") or 0)
            if recovery.get("recovery_success"):
                recovered += 1
        else:
            without_errors += 1
    rate = recovered / errors if errors else 0.0
    summary = {
        "items": len(entries),
        "average_understanding_score": _mean(scores["prompt_understanding"]),
        "average_coverage_score": _mean(scores["requirement_coverage"]),
        "average_recovery_score": _mean(scores["error_recovery"]),
        "average_correctness_score": _mean(scores["correctness"]),
        "average_quality_score": _mean(scores["code_quality"]),
        "average_performance_score": _mean(scores["performance"]),
        "average_overall_score": _mean(overall),
        "passed": passed,
        "errors_encountered": errors,
        "total_recovery_attempts": attempts,
        "successful_recoveries": recovered,
        "recovery_success_rate": round(min(1.0, max(0.0, rate)), 6),
        "items_with_errors": with_errors,
        "items_without_errors": without_errors,
        "items_recovery_unknown": unknown,
    }
    if not errors:
        summary["recovery_note"] = "no item's generated code raised an error: there was nothing to recover from"
    return {"summary": summary}


def write_metrics_files(scores: Iterable[Any], directory: Path, **extra: Any) -> tuple[Path, Path]:
    """Write ``metrics.json`` (a JSON array of entries) and ``metrics_summary.json`` into
    ``directory``; ``extra`` (batch id, suite, ...) goes beside the summary."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = list(iter_entries(scores))
    metrics_path = directory / "metrics.json"
    summary_path = directory / "metrics_summary.json"
    metrics_path.write_text(json.dumps(entries, indent=2, default=str) + "\n")
    summary_path.write_text(json.dumps({**extra, **summarize(entries)}, indent=2, default=str) + "\n")
    return metrics_path, summary_path


def stream_metrics_json(scores: Iterable[Any]) -> Iterator[str]:
    """``metrics.json`` as a streamed JSON array (for an HTTP response)."""
    yield "["
    first = True
    for entry in iter_entries(scores):
        yield ("" if first else ",") + "\n" + json.dumps(entry, default=str)
        first = False
    yield "\n]\n"


# --- report columns (CSV / JSONL exports) -------------------------------------------------------------


def pandas_report_row(score: Any, payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One report row (keys: :data:`REPORT_COLUMNS`) for a stored score."""
    from assay.scoring.store.models import ACTIVE_SCORE_STATUSES

    by_name = {c.component: c for c in score.components}
    if payload is None:
        payload = score.item.payload if score.item is not None else {}

    def value(name: str) -> float | None:
        comp = by_name.get(name)
        return comp.score if comp is not None and comp.status == "ok" else None

    if score.status in ACTIVE_SCORE_STATUSES:
        status = "PENDING"
    else:
        status = "PASS" if score.status == "completed" and score.passed else "FAIL"
    error = None
    correctness = by_name.get("correctness")
    if correctness is not None and (correctness.details or {}).get("executed") is False:
        error = (correctness.details or {}).get("error")
    recovery = by_name.get("error_recovery")
    if error is None and recovery is not None and (recovery.details or {}).get("has_error"):
        error = (recovery.details or {}).get("error_message")
    coverage = by_name.get("requirement_coverage")
    missing = "; ".join((coverage.details or {}).get("missing_requirements") or []) if coverage is not None else None
    row = {
        "Total Score": score.total,
        "Score Status": status,
        "Correctness Score": value("correctness"),
        "Code Quality Score": value("code_quality"),
        "Performance Score": value("performance"),
        "Prompt Understanding Score": value("prompt_understanding"),
        "Requirement Coverage Score": value("requirement_coverage"),
        "Error Recovery Score": value("error_recovery"),
        "Code Review Score": value("code_review"),
        "Question": payload.get("question"),
        "Generated Code": payload.get("generated_code"),
        "Execution Error": error,
        "Missing Requirements": missing or None,
    }
    return {column: row[column] for column in REPORT_COLUMNS}
