"""Plain-data views of stored rows, shared by the API, the CLI and the exports."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.orm.base import NO_VALUE

from assay.scoring.store.models import Batch, Item, Score, ScoreComponent


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:  # SQLite hands back naive UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat().replace("+00:00", "Z")


def _loaded_item(score: Score) -> Item | None:
    """The score's item if it was loaded with it; never a lazy query from a view."""
    value = inspect(score).attrs.item.loaded_value
    return None if value is NO_VALUE else value


def component_view(component: ScoreComponent) -> dict[str, Any]:
    return {
        "status": component.status,
        "score": component.score,
        "weight": component.weight,
        "weighted_score": component.weighted_score,
        "details": component.details or {},
        "reason": component.reason,
        "attempts": component.attempts,
        "raw_output": component.raw_output,
        "cost_usd": component.cost_usd or 0.0,
        "carried_over_from": str(component.carried_over_from) if component.carried_over_from else None,
    }


def score_view(score: Score, *, threshold: float | None = None, current_hash: str | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "score_id": str(score.id),
        "item_id": str(score.item_id),
        "batch_id": str(score.batch_id) if score.batch_id else None,
        "position": score.position,
        "external_id": _loaded_item(score).external_id if _loaded_item(score) is not None else None,
        "suite": score.suite_name,
        "criteria_hash": score.criteria_hash,
        "status": score.status,
        "total_score": score.total,
        "passed": score.passed,
        "partial": score.partial,
        "components": {c.component: component_view(c) for c in score.components},
        "error_kind": score.error_kind,
        "error_message": score.error_message,
        "raw_judge_output": score.raw_judge_output,
        "usage": score.usage or {},
        "cost_usd": score.cost_usd,
        "triggered_by": score.triggered_by,
        "created_at": iso(score.created_at),
        "started_at": iso(score.started_at),
        "completed_at": iso(score.completed_at),
    }
    if threshold is not None:
        view["threshold"] = threshold
    if current_hash is not None:
        view["is_current_criteria"] = score.criteria_hash == current_hash
    if score.partial:
        skipped = [name for name, c in view["components"].items() if c["status"] == "skipped"]
        view["renormalized"] = {"skipped": skipped, "note": "total computed over the remaining components' weights"}
    return view


def export_view(score: Score, *, threshold: float | None = None) -> dict[str, Any]:
    """A result as every JSON export carries it: the score's view and, under ``item``, the item's
    content as it was scored (for a generic suite: input, output, expected, context and metadata; each
    kind's own fields otherwise), so a results file stands on its own."""
    item = _loaded_item(score)
    return {**score_view(score, threshold=threshold), "item": item.payload if item is not None else None}


def live_lines(score: Score, kind: Any, threshold: float) -> list[str]:
    """The kind's live-result lines for a finished score (the KQL scoring design's for KQL), else one generic line."""
    if kind.live_lines is not None:
        return kind.live_lines(score, threshold)
    return [live_line(score, threshold)]


def verdict(score: Score, threshold: float) -> str:
    """A finished score's verdict as the live lines show it: ``PASS ≥90%``, ``FAIL <90%``, or, when the
    total reached the threshold but a pass blocker stopped the item, ``FAIL: <blocker>`` (``FAIL <90%;
    <blocker>`` when both)."""
    mark = f"{100 * threshold:g}%"
    if score.passed:
        return f"PASS ≥{mark}"
    blocker = " ".join((score.error_message or "").split())
    if score.total is not None and score.total < threshold - 1e-12:
        return f"FAIL <{mark}" + (f"; {blocker}" if blocker else "")
    return f"FAIL: {blocker or 'blocked by the pass rule'}"


def live_line(score: Score, threshold: float) -> str:
    """Design 000's live line: ``Score: 92.5% (PASS ≥90%)`` plus the component percentages."""
    if score.status != "completed" or score.total is None:
        return f"{score.status.upper()}: {score.error_message or ''}".strip()
    parts = " | ".join(
        f"{c.component}: {round(100 * c.score)}%" if c.score is not None else f"{c.component}: {c.status}"
        for c in score.components
    )
    partial = " (partial)" if score.partial else ""
    return f"Score: {100 * score.total:.1f}% ({verdict(score, threshold)}){partial} — {parts}"


def batch_view(batch: Batch, progress: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "batch_id": str(batch.id),
        "suite": batch.suite_name,
        "criteria_hash": batch.criteria_hash,
        "status": batch.status,
        "created_by": batch.created_by,
        "total_items": batch.total_items,
        "budget_usd": batch.budget_usd,
        "spent_usd": round(batch.spent_usd or 0.0, 6) if batch.budget_usd is not None else None,
        "judge_lane": batch.judge_lane,
        "created_at": iso(batch.created_at),
        "finished_at": iso(batch.finished_at),
        "progress": None if batch.pruned_at is not None else progress,
        "summary": batch.summary,
        "pruned": {"at": iso(batch.pruned_at), "scores_removed": batch.pruned_scores} if batch.pruned_at else None,
    }


def item_view(item: Item) -> dict[str, Any]:
    return {
        "item_id": str(item.id),
        "kind": item.kind,
        "external_id": item.external_id,
        "content_hash": item.content_hash,
        "payload": item.payload,
        "created_at": iso(item.created_at),
    }

