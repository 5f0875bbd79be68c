"""metrics.json entries and metrics_summary.json, from score views as the store gives them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from assay.scoring.pandas.report import (
    REPORT_COLUMNS,
    metrics_entry,
    pandas_report_row,
    stream_metrics_json,
    summarize,
    write_metrics_files,
)


def comp(score, details=None, status="ok", reason=None):
    return {"status": status, "score": score, "weight": 0.1, "details": details or {}, "reason": reason}


def view(position, recovery, total=0.9):
    return {
        "score_id": f"s{position}", "item_id": f"i{position}", "position": position, "status": "completed",
        "total_score": total, "passed": total >= 0.85, "partial": recovery["status"] != "ok", "criteria_hash": "h",
        "completed_at": "2024-01-01T00:00:00Z",
        "components": {
            "correctness": comp(1.0, {"match": True}),
            "code_quality": comp(0.9, {"lint_findings": []}),
            "performance": comp(1.0, {"time_band": 1.0}),
            "prompt_understanding": comp(0.85, {"column_extraction_score": 0.4, "mentioned_columns": ["a"]}),
            "requirement_coverage": comp(0.7, {"missing_requirements": ["Sorting missing"]}),
            "error_recovery": recovery,
        },
    }


NO_ERROR = comp(None, {"has_error": False, "recovery_attempts_count": 0, "recovery_details": []}, status="skipped", reason="no error")
RECOVERED = comp(0.87, {"has_error": True, "error_message": "KeyError: 'age'", "recovery_attempts_count": 2, "recovery_success": True,
                        "recovery_success_rate": 0.5, "error_fix_quality": 0.55, "recovery_details": [{"attempt_number": 1}, {"attempt_number": 2}]})
FAILED_TO_RECOVER = comp(0.1, {"has_error": True, "error_message": "TypeError: x", "recovery_attempts_count": 1, "recovery_success": False,
                               "recovery_success_rate": 0.0, "error_fix_quality": 0.1, "recovery_details": [{"attempt_number": 1}]})


def entries():
    return [
        metrics_entry(view(1, NO_ERROR), {"question": "q1", "id": "a"}),
        metrics_entry(view(2, RECOVERED, 0.7), {"question": "q2"}),
        metrics_entry(view(3, FAILED_TO_RECOVER, 0.4), {"question": "q3"}),
    ]


def test_entries_have_the_design_blocks():
    first, second, _ = entries()
    assert first["prompt_understanding"] == {"understanding_score": 0.85, "details": {"column_extraction_score": 0.4, "mentioned_columns": ["a"]}}
    assert first["requirement_coverage"]["coverage_score"] == 0.7
    assert first["requirement_coverage"]["details"]["missing_requirements"] == ["Sorting missing"]
    recovery = first["error_recovery"]
    assert recovery["has_error"] is False and recovery["recovery_score"] is None and "nothing to recover" in recovery["note"]
    assert recovery["status"] == "skipped"
    assert second["error_recovery"]["recovery_score"] == 0.87 and second["error_recovery"]["recovery_attempts_count"] == 2
    assert set(second["error_recovery"]) >= {"has_error", "error_message", "recovery_attempts_count", "recovery_success",
                                             "recovery_success_rate", "error_fix_quality", "recovery_score", "recovery_details"}
    assert first["question"] == "q1" and first["external_id"] == "a" and first["overall_score"] == 0.9


def test_summary_fields_and_the_rate_stays_in_range():
    summary = summarize(entries())["summary"]
    assert summary["errors_encountered"] == 2 and summary["items_without_errors"] == 1
    assert summary["total_recovery_attempts"] == 3 and summary["successful_recoveries"] == 1
    assert summary["recovery_success_rate"] == pytest.approx(0.5)
    assert summary["average_understanding_score"] == pytest.approx(0.85)
    assert summary["average_coverage_score"] == pytest.approx(0.7)
    assert summary["average_recovery_score"] == pytest.approx((0.87 + 0.1) / 2)  # items with errors only
    # However many attempts succeed, the rate is per item with an error: never above 1.
    many = [metrics_entry(view(i, comp(1.0, {"has_error": True, "recovery_attempts_count": 5, "recovery_success": True})), {}) for i in range(3)]
    assert summarize(many)["summary"]["recovery_success_rate"] == 1.0
    clean = summarize([metrics_entry(view(1, NO_ERROR), {})])["summary"]
    assert clean["recovery_success_rate"] == 0.0 and clean["errors_encountered"] == 0 and "nothing to recover" in clean["recovery_note"]
    assert summarize([])["summary"]["average_understanding_score"] is None


def test_files_are_written_and_streamed(tmp_path):
    pairs = [(view(1, NO_ERROR), {"question": "q1"}), (view(2, RECOVERED), {"question": "q2"})]
    metrics_path, summary_path = write_metrics_files(pairs, tmp_path, batch_id="b1")
    written = json.loads(metrics_path.read_text())
    assert [e["position"] for e in written] == [1, 2]
    summary = json.loads(summary_path.read_text())
    assert summary["batch_id"] == "b1" and summary["summary"]["successful_recoveries"] == 1
    assert json.loads("".join(stream_metrics_json(pairs))) == written
    assert json.loads("".join(stream_metrics_json([]))) == []


def test_report_row_columns():
    components = [SimpleNamespace(component=n, status=c["status"], score=c["score"], details=c["details"], reason=c["reason"])
                  for n, c in view(1, RECOVERED)["components"].items()]
    score = SimpleNamespace(components=components, item=SimpleNamespace(payload={"question": "q", "generated_code": "x"}),
                            status="completed", passed=True, total=0.9)
    row = pandas_report_row(score)
    assert list(row) == list(REPORT_COLUMNS)
    assert row["Score Status"] == "PASS" and row["Correctness Score"] == 1.0 and row["Error Recovery Score"] == 0.87
    assert row["Execution Error"] == "KeyError: 'age'" and row["Missing Requirements"] == "Sorting missing"
