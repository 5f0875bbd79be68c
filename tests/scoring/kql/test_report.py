"""KQL report columns (the KQL scoring design's seven fields plus prompt, queries and execution error) and the
live-result lines."""

from __future__ import annotations

import uuid
from typing import Any

from assay.scoring.kinds.kql import KIND
from assay.scoring.kql.report import REPORT_COLUMNS, kql_live_lines, kql_report_row
from assay.scoring.store.models import Item, Score, ScoreComponent

PAYLOAD = {"prompt": "Count traces by level", "generated_kql": "Traces | count", "expected_kql": "Traces | summarize count() by level"}


def component(name: str, status: str = "ok", score: float | None = None, **extra: Any) -> ScoreComponent:
    return ScoreComponent(component=name, status=status, score=score, weight=0.25, details=extra.pop("details", None), reason=extra.pop("reason", None))


def stored(
    status: str = "completed",
    passed: bool | None = True,
    total: float | None = 0.95,
    payload: dict | None = None,
    comps: list | None = None,
    **extra: Any,
) -> Score:
    return Score(
        **extra,
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
        "Pass Blocker",
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
        "Pass Blocker": None,
    }


def test_a_blocked_score_names_its_blocker_and_keeps_its_total() -> None:
    """Issue 19: Score Status stays PASS / FAIL; the blocker is named beside it."""
    blocker = "results_match: no execution evidence: the item has no expected results to compare with"
    score = stored(passed=False, total=0.95)
    score.error_message = blocker
    row = kql_report_row(score)
    assert (row["Total Score"], row["Score Status"], row["Pass Blocker"]) == (0.95, "FAIL", blocker)
    score.total = 0.7
    assert kql_live_lines(score, 0.9)[2] == f"Score: 70.0% (FAIL <90%; {blocker})"


def test_an_expected_query_that_cannot_execute_offline_is_reported_as_such() -> None:
    reason = "the expected query cannot be executed offline (Binder Error: x), and the item supplies no expected results to fall back on"
    score = stored(passed=False, comps=[component("results_match", "skipped", reason=reason)])
    assert kql_report_row(score)["Execution Error"] == (
        "expected query: cannot be executed offline (Binder Error: x), and the item supplies no expected results to fall back on"
    )


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


# --- live results (the KQL scoring design's batch view) ---------------------------------------------------

def finished(total: float, passed: bool, comps: list, payload: dict | None = None, **extra: Any) -> Score:
    return stored(status="completed", passed=passed, total=total, payload=payload, comps=comps, **extra)


def test_the_kind_shows_kql_live_lines() -> None:
    assert KIND.live_lines is kql_live_lines


def test_live_lines_of_a_passing_score() -> None:
    score = finished(
        0.925,
        True,
        [
            component("schema_match", score=1.0),
            component("semantic_similarity", score=0.85),
            component("results_match", score=0.95, details={"generated_rows": 12, "source": "offline"}),
            component("llm_grading", score=0.9, details={"reasoning": "ok"}),
        ],
    )
    assert kql_live_lines(score, 0.9) == [
        "Query: Traces | count",
        "Query executed (results: 12)",
        "Score: 92.5% (PASS ≥90%)",
        "Schema: 100% | Semantic: 85% | Results: 95% | LLM: 90%",
    ]


def test_live_lines_of_a_failing_partial_score() -> None:
    score = finished(
        0.55,
        False,
        [
            component("schema_match", score=0.5),
            component("semantic_similarity", score=0.45),
            component("results_match", score=0.7, details={"generated_rows": 0}),
            component("llm_grading", "skipped", reason="no Anthropic API key is configured"),
        ],
        partial=True,
    )
    lines = kql_live_lines(score, 0.9)
    assert lines[1:] == [
        "Query executed (results: 0)",
        "Score: 55.0% (FAIL <90%) (partial)",
        "Schema: 50% | Semantic: 45% | Results: 70% | LLM: skipped",
    ]


def test_live_lines_when_the_query_did_not_execute() -> None:
    error = 'Binder Error: Referenced column "Country" not found'
    did_not = {"reason": "generated query did not execute", "error": error}
    score = finished(
        0.2,
        False,
        [
            component("schema_match", score=0.0, details=did_not),
            component("semantic_similarity", score=0.7),
            component("results_match", score=0.0, details=did_not),
            component("llm_grading", "failed", reason="boom"),
        ],
        error_message=f"generated query did not execute: {error}",
    )
    lines = kql_live_lines(score, 0.9)
    assert lines[1] == f"Query failed: {error}"
    assert lines[2] == f"Score: 20.0% (FAIL <90%; generated query did not execute: {error})"
    assert lines[3] == "Schema: 0% | Semantic: 70% | Results: 0% | LLM: failed"
    reported = finished(0.0, False, [component("results_match", score=0.0)], payload={**PAYLOAD, "generated_error": "Semantic error"})
    assert kql_live_lines(reported, 0.9)[1] == "Query failed: Semantic error"


def test_live_lines_when_the_total_passes_but_the_pass_rule_blocks() -> None:
    score = finished(0.95, False, [component("schema_match", score=0.95)], error_message="could not check offline that the generated query executes: down")
    assert kql_live_lines(score, 0.9)[2] == "Score: 95.0% (FAIL: could not check offline that the generated query executes: down)"


def test_live_lines_when_the_query_could_not_run_offline() -> None:
    reason = "the generated query cannot be executed offline (EvaluateOperator), and the item supplies no expected results to fall back on"
    score = finished(
        0.9,
        True,
        [
            component("schema_match", "skipped", reason=reason),
            component("semantic_similarity", score=0.8),
            component("results_match", "skipped", reason=reason),
            component("llm_grading", score=1.0),
        ],
        partial=True,
    )
    lines = kql_live_lines(score, 0.9)
    assert lines[1] == f"Query not executed offline: {reason}"
    assert lines[2] == "Score: 90.0% (PASS ≥90%) (partial)"
    assert lines[3] == "Schema: skipped | Semantic: 80% | Results: skipped | LLM: 100%"


def test_live_lines_count_supplied_results_when_nothing_compared_them() -> None:
    payload = {**PAYLOAD, "generated_results": [{"n": 1}, {"n": 2}]}
    score = finished(
        1.0, True, [component("results_match", "skipped", reason="the item has no expected results to compare with")], payload=payload
    )
    assert kql_live_lines(score, 0.9)[1] == "Query executed (results: 2)"


def test_live_lines_of_a_failed_and_a_running_score() -> None:
    failed = stored(status="failed", passed=False, total=None, comps=[component("results_match", "failed", reason="x")])
    failed.error_message = "results_match: the expected query did not execute: Binder Error: Nope"
    assert kql_live_lines(failed, 0.9) == [
        "Query: Traces | count",
        "ERROR: results_match: the expected query did not execute: Binder Error: Nope",
    ]
    running = stored(status="in_progress", passed=None, total=None, comps=[component("schema_match", "pending")])
    assert kql_live_lines(running, 0.9) == ["Query: Traces | count", "Scoring: in_progress"]


def test_live_lines_put_the_query_on_one_short_line_and_never_round_up_to_a_full_mark() -> None:
    long_query = "Traces\n| where level == 'Error'\n|   " + " or ".join(f"message has 'word{i}'" for i in range(40))
    score = finished(
        0.996,
        True,
        [component("schema_match", score=0.996), component("results_match", score=1.0, details={"generated_rows": 1})],
        payload={**PAYLOAD, "generated_kql": long_query},
    )
    lines = kql_live_lines(score, 0.85)
    assert lines[0].startswith("Query: Traces | where level == 'Error' | message has 'word0' or")
    assert len(lines[0]) == len("Query: ") + 200 and lines[0].endswith("…") and "\n" not in lines[0]
    assert lines[2] == "Score: 99.6% (PASS ≥85%)"
    assert lines[3] == "Schema: 99% | Results: 100%"
