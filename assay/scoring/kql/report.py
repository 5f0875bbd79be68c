"""The columns of KQL reports (the KQL scoring design's seven fields, plus the prompt, both queries and any
execution error) and the KQL scoring design's live-result lines, for one stored score.

Design 000's fields, in its order:

- ``Total Score``: the score's total, 0..1 (None until it is computed, or when it failed);
- ``Score Status``: ``PASS`` or ``FAIL`` for a finished score (a failed, timed-out or cancelled
  score is ``FAIL``); ``PENDING`` while it runs;
- ``Schema Match Score``, ``Semantic Similarity Score``, ``Results Match Score``, ``LLM Grading
  Score``: the components' scores, 0..1 (None when skipped, failed or not landed);
- ``LLM Reasoning``: the judge's reasoning; when the judge did not grade, why (``skipped: ...``).

Then ``Prompt``, ``Generated Query``, ``Expected Query`` and ``Execution Error``: the error the item
reports for its generated query, else the one its offline run found (or the parser's, when the
generated query does not parse); an expected query that failed is reported as ``expected query: ...``.
Last, ``Pass Blocker``: why a finished item cannot pass whatever its total (no execution evidence,
results that differ under ``kql_strict``, a generated query that did not execute), else empty.

Live results (:func:`kql_live_lines`), as the KQL scoring design's batch view shows each query::

    Query: <generated KQL on one line, cut at 200 characters>
    Query executed (results: 12)
    Score: 92.5% (PASS ≥90%)
    Schema: 100% | Semantic: 85% | Results: 95% | LLM: 90%

The second line is ``Query failed: <error>`` when the generated query did not execute (or does not
parse), and ``Query not executed offline: <reason>`` when no results were compared (an engine gap
with nothing supplied to fall back on, or an item with neither results nor a dataset). ``results``
is the number of rows the generated query returned (offline, or supplied in the item). The score
reads ``FAIL <90%`` below the threshold, ``FAIL: <blocker>`` when the total reaches it but a pass
blocker stops the item (``FAIL <90%; <blocker>`` when both), and ``(partial)`` follows when a skipped component's weight
was spread over the others (the judge was skipped, say). A component without a score shows its
status (``skipped``, ``failed``). A score that failed shows ``Query: ...`` then ``ERROR: <message>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.scoring.reports.views import verdict
from assay.scoring.store.models import ACTIVE_SCORE_STATUSES, Score

__all__ = ["COMPONENT_COLUMNS", "LIVE_LABELS", "REPORT_COLUMNS", "kql_live_lines", "kql_report_row"]

# Report column -> the component it shows, as the shipped KQL suites (kql, kql_strict) name them.
COMPONENT_COLUMNS: dict[str, str] = {
    "Schema Match Score": "schema_match",
    "Semantic Similarity Score": "semantic_similarity",
    "Results Match Score": "results_match",
    "LLM Grading Score": "llm_grading",
}

REPORT_COLUMNS: tuple[str, ...] = (
    "Total Score",
    "Score Status",
    *COMPONENT_COLUMNS,
    "LLM Reasoning",
    "Prompt",
    "Generated Query",
    "Expected Query",
    "Execution Error",
    "Pass Blocker",
)

_DID_NOT_EXECUTE = "generated query did not execute"
_DOES_NOT_PARSE = "the generated query does not parse"
_EXPECTED_OFFLINE = "the expected query cannot be executed offline"

# Live-line label -> the component it shows, in the KQL scoring design's order.
LIVE_LABELS: dict[str, str] = {
    "Schema": "schema_match",
    "Semantic": "semantic_similarity",
    "Results": "results_match",
    "LLM": "llm_grading",
}
QUERY_CHARS = 200


def kql_report_row(
    score: Score,
    payload: Mapping[str, Any] | None = None,
    *,
    components: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One report row (keys: :data:`REPORT_COLUMNS`, in order) for a stored score.

    ``score.components`` and ``score.item`` are read (load them with the score, e.g.
    ``selectinload``); ``payload`` overrides the item's payload when the caller has it already.
    ``components`` maps a report column to a component name for suites that name them otherwise.
    """
    names = {**COMPONENT_COLUMNS, **(components or {})}
    by_name = {c.component: c for c in score.components}
    if payload is None:
        payload = score.item.payload if score.item is not None else {}

    row: dict[str, Any] = {"Total Score": score.total, "Score Status": _status(score)}
    for column, component in names.items():
        comp = by_name.get(component)
        row[column] = comp.score if comp is not None and comp.status == "ok" else None
    row["LLM Reasoning"] = _reasoning(by_name.get(names["LLM Grading Score"]))
    row["Prompt"] = payload.get("prompt")
    row["Generated Query"] = payload.get("generated_kql")
    row["Expected Query"] = payload.get("expected_kql")
    row["Execution Error"] = _execution_error(payload, by_name, names)
    row["Pass Blocker"] = _blocker(score)
    return {column: row[column] for column in REPORT_COLUMNS}


def _blocker(score: Score) -> str | None:
    """A completed score that did not pass carries its pass blockers as its message."""
    return score.error_message if score.status == "completed" and not score.passed and score.error_message else None


def _status(score: Score) -> str:
    if score.status in ACTIVE_SCORE_STATUSES:
        return "PENDING"
    return "PASS" if score.status == "completed" and score.passed else "FAIL"


def _reasoning(judge: Any) -> str | None:
    if judge is None:
        return None
    if judge.status == "ok":
        return (judge.details or {}).get("reasoning")
    if judge.status in ("skipped", "failed"):
        return f"{judge.status}: {judge.reason}" if judge.reason else judge.status
    return None


def _execution_error(payload: Mapping[str, Any], by_name: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    if payload.get("generated_error"):
        return str(payload["generated_error"])
    for column in ("Schema Match Score", "Results Match Score", "Semantic Similarity Score"):
        comp = by_name.get(names[column])
        details = (comp.details or {}) if comp is not None else {}
        if comp is not None and comp.status == "ok" and details.get("error") and comp.score == 0.0:
            if details.get("reason") in (_DID_NOT_EXECUTE, "the generated query does not parse"):
                return str(details["error"])
    if payload.get("expected_error"):
        return f"expected query: {payload['expected_error']}"
    for column in ("Schema Match Score", "Results Match Score"):
        comp = by_name.get(names[column])
        reason = (comp.reason or "") if comp is not None else ""
        if comp is not None and comp.status == "failed" and reason.startswith("the expected query did not execute"):
            return f"expected query: {reason.split(': ', 1)[-1]}"
        if comp is not None and comp.status == "skipped" and reason.startswith(_EXPECTED_OFFLINE):
            return f"expected query: {reason.removeprefix('the expected query ')}"
    return None


def kql_live_lines(score: Score, threshold: float) -> list[str]:
    """Design 000's live-result lines for one score (see the module docstring).

    ``score.components`` and ``score.item`` are read (load them with the score)."""
    payload = score.item.payload if score.item is not None else {}
    lines = [f"Query: {_one_line(str(payload.get('generated_kql') or ''))}"]
    if score.status in ACTIVE_SCORE_STATUSES:
        return [*lines, f"Scoring: {score.status}"]
    if score.status != "completed" or score.total is None:
        return [*lines, f"ERROR: {score.error_message or score.status}"]

    by_name = {c.component: c for c in score.components}
    lines.append(_execution_line(payload, by_name))
    partial = " (partial)" if score.partial else ""
    lines.append(f"Score: {100 * score.total:.1f}% ({verdict(score, threshold)}){partial}")
    parts = []
    for label, name in LIVE_LABELS.items():
        comp = by_name.get(name)
        if comp is not None:
            parts.append(f"{label}: {_percent(comp.score) if comp.status == 'ok' and comp.score is not None else comp.status}")
    lines.append(" | ".join(parts))
    return lines


def _one_line(text: str, limit: int = QUERY_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _percent(value: float) -> str:
    shown = round(100 * value)
    if shown == 100 and value < 1.0:
        shown = 99  # never show a full mark that was not earned
    return f"{shown}%"


def _execution_line(payload: Mapping[str, Any], by_name: Mapping[str, Any]) -> str:
    error = _generated_error(payload, by_name, (_DID_NOT_EXECUTE,))
    if error:
        return f"Query failed: {_one_line(error)}"
    results = by_name.get(COMPONENT_COLUMNS["Results Match Score"])
    details = (results.details or {}) if results is not None else {}
    if results is not None and results.status == "ok" and "generated_rows" in details:
        return f"Query executed (results: {details['generated_rows']})"
    if isinstance(payload.get("generated_results"), list):  # the item's word: it ran elsewhere
        return f"Query executed (results: {len(payload['generated_results'])})"
    error = _generated_error(payload, by_name, (_DOES_NOT_PARSE,))
    if error:
        return f"Query failed: {_one_line(error)}"
    if results is not None and results.reason:
        return f"Query not executed offline: {_one_line(results.reason)}"
    return "Query not executed offline: no results were compared"


def _generated_error(payload: Mapping[str, Any], by_name: Mapping[str, Any], reasons: tuple[str, ...]) -> str | None:
    if payload.get("generated_error"):
        return str(payload["generated_error"])
    for name in ("results_match", "schema_match", "semantic_similarity"):
        comp = by_name.get(name)
        details = (comp.details or {}) if comp is not None else {}
        if comp is not None and comp.status == "ok" and details.get("reason") in reasons:
            return str(details.get("error") or details["reason"])
    return None
