"""The EP-0028 response for a stored score, and the export columns of the ``alert_session`` kind."""

from __future__ import annotations

from typing import Any

from assay.scoring.pipeline.components import JUDGE_QUEUES
from assay.scoring.reports.views import iso
from assay.scoring.sessions.store import Feedback, percent
from assay.scoring.store.models import Score

# The response's fields, in order: the EP's example, then status, error, timing, usage and cost.
SCORE_FIELDS = (
    "score_id",
    "session_id",
    "criteria_hash",
    "total_score",
    "score_breakdown",
    "score_reasoning",
    "missing_tools",
    "alternative_approaches",
    "scored_triggered_by",
    "scored_at",
    "is_current_criteria",
    "status",
    "error_message",
    "started_at",
    "completed_at",
    "usage",
    "cost_usd",
)


def judge_details(score: Score) -> dict[str, Any]:
    """The judge component's details when it gave a verdict (``score.components`` loaded)."""
    judge = next((c for c in score.components if c.queue in JUDGE_QUEUES), None)
    return (judge.details or {}) if judge is not None and judge.status == "ok" else {}


def session_score_view(
    score: Score, session_id: str | None, *, current_hash: str | None, feedback: Feedback | None
) -> dict[str, Any]:
    """EP-0028's ``SessionScore`` for one score. A score that is not completed has no total,
    breakdown, reasoning or feedback (``status`` and ``error_message`` say why)."""
    completed = score.status == "completed"
    details = judge_details(score) if completed else {}
    feedback = feedback if completed and feedback is not None else Feedback([], [])
    view = {
        "score_id": str(score.id),
        "session_id": session_id,
        "criteria_hash": score.criteria_hash,
        "total_score": percent(score.total) if completed else None,
        "score_breakdown": details.get("score_breakdown"),
        "score_reasoning": details.get("score_reasoning"),
        "missing_tools": feedback.missing_tools,
        "alternative_approaches": feedback.alternative_approaches,
        "scored_triggered_by": score.triggered_by,
        "scored_at": iso(score.completed_at) if completed else None,
        "is_current_criteria": current_hash is not None and score.criteria_hash == current_hash,
        "status": score.status,
        "error_message": score.error_message,
        "started_at": iso(score.started_at),
        "completed_at": iso(score.completed_at),
        "usage": score.usage or {},
        "cost_usd": score.cost_usd,
    }
    return {field: view[field] for field in SCORE_FIELDS}


REPORT_COLUMNS = (
    "Session ID",
    "Status",
    "Total Score",
    "Logical Flow",
    "Consistency",
    "Tool Relevance",
    "Synthesis Quality",
    "Missing Tools",
    "Alternative Approaches",
    "Score Reasoning",
    "Criteria Hash",
    "Error",
)


def report_columns(score: Score) -> dict[str, Any]:
    """One export row (CSV / the JSONL ``report``) for a score with its components and item loaded."""
    completed = score.status == "completed"
    details = judge_details(score) if completed else {}
    breakdown = details.get("score_breakdown") or {}
    return {
        "Session ID": score.item.external_id if score.item is not None else None,
        "Status": score.status,
        "Total Score": percent(score.total) if completed else None,
        "Logical Flow": breakdown.get("logical_flow"),
        "Consistency": breakdown.get("consistency"),
        "Tool Relevance": breakdown.get("tool_relevance"),
        "Synthesis Quality": breakdown.get("synthesis_quality"),
        "Missing Tools": "; ".join(t.get("tool_name", "") for t in details.get("missing_tools") or []),
        "Alternative Approaches": "; ".join(a.get("name", "") for a in details.get("alternative_approaches") or []),
        "Score Reasoning": details.get("score_reasoning"),
        "Criteria Hash": score.criteria_hash,
        "Error": score.error_message,
    }
