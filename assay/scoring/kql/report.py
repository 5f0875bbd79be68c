"""The columns of KQL reports: design 000's seven fields, plus the prompt, both queries and any
execution error, for one stored score.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.scoring.store.models import ACTIVE_SCORE_STATUSES, Score

__all__ = ["COMPONENT_COLUMNS", "REPORT_COLUMNS", "kql_report_row"]

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
)

_DID_NOT_EXECUTE = "generated query did not execute"


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
    return {column: row[column] for column in REPORT_COLUMNS}


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
        if comp is not None and comp.status == "failed" and (comp.reason or "").startswith("the expected query did not execute"):
            return f"expected query: {comp.reason.split(': ', 1)[-1]}"
    return None
