"""KQL report columns: design 000's seven fields plus prompt, queries and execution error."""

from __future__ import annotations

import uuid
from typing import Any

from assay.scoring.kql.report import REPORT_COLUMNS, kql_report_row
from assay.scoring.store.models import Item, Score, ScoreComponent

PAYLOAD = {"prompt": "Count traces by level", "generated_kql": "Traces | count", "expected_kql": "Traces | summarize count() by level"}


def component(name: str, status: str = "ok", score: float | None = None, **extra: Any) -> ScoreComponent:
    return ScoreComponent(component=name, status=status, score=score, weight=0.25, details=extra.pop("details", None), reason=extra.pop("reason", None))


def stored(status: str = "completed", passed: bool | None = True, total: float | None = 0.95, payload: dict | None = None, comps: list | None = None) -> Score:
    return Score(
        id=uuid.uuid4(),
        status=status,
        passed=passed,
        total=total,
        item=Item(payload=payload if payload is not None else PAYLOAD),
        components=comps
        if comps is not None
        else [
            component("schema_match", score=1.0),
            component("semantic_similarity", score=0.8),
            component("results_match", score=1.0),
            component("llm_grading", score=1.0, details={"reasoning": "Equivalent.", "model": "m"}),
        ],
    )


def test_columns_are_the_design_fields_then_the_item() -> None:
    assert REPORT_COLUMNS == (
        "Total Score",
        "Score Status",
        "Schema Match Score",
        "Semantic Similarity Score",
        "Results Match Score",
        "LLM Grading Score",
        "LLM Reasoning",
        "Prompt",
        "Generated Query",
        "Expected Query",
        "Execution Error",
    )


def test_a_passing_score() -> None:
    row = kql_report_row(stored())
    assert list(row) == list(REPORT_COLUMNS)
    assert row == {
        "Total Score": 0.95,
        "Score Status": "PASS",
        "Schema Match Score": 1.0,
        "Semantic Similarity Score": 0.8,
        "Results Match Score": 1.0,
        "LLM Grading Score": 1.0,
        "LLM Reasoning": "Equivalent.",
        "Prompt": "Count traces by level",
        "Generated Query": "Traces | count",
        "Expected Query": "Traces | summarize count() by level",
        "Execution Error": None,
    }


def test_status_fail_pending_and_failed_scores() -> None:
    assert kql_report_row(stored(passed=False, total=0.5))["Score Status"] == "FAIL"
    assert kql_report_row(stored(status="failed", passed=False, total=None))["Score Status"] == "FAIL"
    assert kql_report_row(stored(status="cancelled", passed=None, total=None))["Score Status"] == "FAIL"
    pending = kql_report_row(stored(status="in_progress", passed=None, total=None, comps=[component("schema_match", "pending")]))
    assert pending["Score Status"] == "PENDING" and pending["Schema Match Score"] is None and pending["LLM Reasoning"] is None


def test_an_offline_execution_error_and_a_skipped_judge() -> None:
    error = "Binder Error: Referenced column \"Country\" not found"
    score = stored(
        passed=False,
        total=0.2,
        comps=[
            component("schema_match", score=0.0, details={"reason": "generated query did not execute", "error": error}),
            component("semantic_similarity", score=0.7),
            component("results_match", score=0.0, details={"reason": "generated query did not execute", "error": error}),
            component("llm_grading", "skipped", reason="no Anthropic API key is configured"),
        ],
    )
    row = kql_report_row(score)
    assert row["Execution Error"] == error
    assert row["LLM Grading Score"] is None and row["LLM Reasoning"] == "skipped: no Anthropic API key is configured"
    assert row["Results Match Score"] == 0.0


def test_errors_the_item_reports_and_an_expected_query_that_failed() -> None:
    reported = stored(payload={**PAYLOAD, "generated_error": "Semantic error"}, passed=False)
    assert kql_report_row(reported)["Execution Error"] == "Semantic error"
    failed = stored(
        status="failed",
        passed=False,
        total=None,
        comps=[component("results_match", "failed", reason="the expected query did not execute: Binder Error: Nope")],
    )
    assert kql_report_row(failed)["Execution Error"] == "expected query: Binder Error: Nope"
    unparsable = stored(
        comps=[component("semantic_similarity", score=0.0, details={"reason": "the generated query does not parse", "error": "could not parse KQL at 1:2"})]
    )
    assert kql_report_row(unparsable)["Execution Error"] == "could not parse KQL at 1:2"


def test_component_names_can_be_mapped_and_payload_given() -> None:
    score = stored(comps=[component("columns", score=0.5), component("judge", score=0.9, details={"reasoning": "ok"})])
    row = kql_report_row(
        score, {"prompt": "other"}, components={"Schema Match Score": "columns", "LLM Grading Score": "judge"}
    )
    assert row["Schema Match Score"] == 0.5 and row["LLM Grading Score"] == 0.9 and row["LLM Reasoning"] == "ok"
    assert row["Prompt"] == "other" and row["Generated Query"] is None
