"""kql.results_match: rows compared whole, by value, as multisets or in order; recall and f1."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds.kql import KqlItem
from assay.scoring.kql.results import compare_rows
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import ComponentResult, MetricContext

CTX = MetricContext(now=datetime(2007, 1, 31))

EXPECTED = [
    {"State": "TEXAS", "n": 4},
    {"State": "IOWA", "n": 2},
    {"State": "KANSAS", "n": 1},
    {"State": "OHIO", "n": 3},
]


def unordered(expected: list[dict[str, Any]], generated: list[dict[str, Any]], **kw: Any) -> float:
    return compare_rows(expected, generated, ordered=False, **kw)[0]


def test_recall_counts_expected_rows_found_and_ignores_extra_rows() -> None:
    generated = EXPECTED[:3] + [{"State": "UTAH", "n": 9}, {"State": "IDAHO", "n": 9}]
    score, details = compare_rows(EXPECTED, generated, ordered=False)
    assert score == 0.75
    assert details["matched_rows"] == 3
    assert details["missing_rows"] == [{"State": "OHIO", "n": 3}]


def test_f1_also_penalises_extra_rows() -> None:
    generated = EXPECTED[:3] + [{"State": "UTAH", "n": 9}, {"State": "IDAHO", "n": 9}]
    score, details = compare_rows(EXPECTED, generated, ordered=False, mode="f1")
    recall, precision = 3 / 4, 3 / 5
    assert score == pytest.approx(2 * recall * precision / (recall + precision))
    assert (details["recall"], details["precision"]) == (0.75, 0.6)
    assert details["extra_rows"] == [{"State": "UTAH", "n": 9}, {"State": "IDAHO", "n": 9}]


def test_identical_rows_in_another_order_match_when_order_is_free() -> None:
    assert unordered(EXPECTED, list(reversed(EXPECTED))) == 1.0
    assert unordered(EXPECTED, list(reversed(EXPECTED)), mode="f1") == 1.0


def test_order_counts_when_the_expected_query_sorts() -> None:
    swapped = [EXPECTED[1], EXPECTED[0], *EXPECTED[2:]]
    score, details = compare_rows(EXPECTED, swapped, ordered=True)
    assert score == 0.5
    assert details["missing_rows"] == EXPECTED[:2]
    assert compare_rows(EXPECTED, EXPECTED[:2], ordered=True, mode="f1")[0] == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_values_stay_with_their_column() -> None:
    # Same loose values, different pairing: no row matches.
    assert unordered([{"a": 1, "b": 2}, {"a": 2, "b": 1}], [{"a": 1, "b": 1}, {"a": 2, "b": 2}]) == 0.0


def test_numbers_by_value_strings_as_text_nulls_as_one() -> None:
    assert unordered([{"x": 1, "y": 2.5}], [{"x": 1.0, "y": 2.5000000000001}]) == 1.0
    assert unordered([{"x": 1}], [{"x": "1"}]) == 0.0
    assert unordered([{"x": None}], [{"x": float("nan")}]) == 1.0
    assert unordered([{"x": True}], [{"x": 1}]) == 0.0


def test_datetimes_compare_in_utc() -> None:
    naive = datetime(2007, 1, 1, 12)
    aware = datetime(2007, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    assert unordered([{"t": naive}], [{"t": aware}]) == 1.0


def test_dynamic_values_compare_as_json() -> None:
    assert unordered([{"d": {"a": 1, "b": [1, 2]}}], [{"d": {"b": [1, 2], "a": 1}}]) == 1.0


def test_column_names_are_case_insensitive_and_extra_columns_free() -> None:
    assert unordered([{"State": "TEXAS"}], [{"state": "TEXAS", "extra": 1}]) == 1.0


def test_a_missing_column_makes_the_row_differ_even_from_null() -> None:
    assert unordered([{"State": "TEXAS", "n": None}], [{"State": "TEXAS"}]) == 0.0


def test_rows_are_a_multiset() -> None:
    assert unordered([{"a": 1}, {"a": 1}], [{"a": 1}]) == 0.5
    assert unordered([{"a": 1}], [{"a": 1}, {"a": 1}], mode="f1") == pytest.approx(2 * 1 * 0.5 / 1.5)


def test_every_row_is_compared_on_both_sides() -> None:
    """Version 3: no sample of the first rows (which hid extra rows past it: 118 rows for 110)."""
    expected = [{"n": i} for i in range(110)]
    generated = expected + [{"n": 1000 + i} for i in range(8)]
    score, details = compare_rows(expected, generated, ordered=False, mode="f1")
    assert details["compared_rows"] == 110 and details["precision"] == pytest.approx(110 / 118)
    assert score == pytest.approx(2 * 110 / 228)
    score, _ = compare_rows(expected, expected[:105], ordered=False)
    assert score == pytest.approx(105 / 110)


def test_no_expected_rows() -> None:
    assert unordered([], []) == 1.0
    assert unordered([], [{"a": 1}]) == 0.0


def test_mismatch_samples_are_capped_and_serialisable() -> None:
    expected = [{"t": datetime(2007, 1, i + 1)} for i in range(10)]
    _, details = compare_rows(expected, [], ordered=False)
    assert details["missing_rows"] == [{"t": f"2007-01-0{day} 00:00:00"} for day in (1, 2, 3)]


# --- the metric ----------------------------------------------------------------------------------------


def results(item: dict[str, Any], **args: Any) -> ComponentResult:
    metric = build_metric("kql.results_match", 3, args, "kql")
    return metric(KqlItem(prompt="p", **item), CTX)


def test_metric_orders_rows_by_the_expected_query() -> None:
    rows = {"expected_results": EXPECTED, "generated_results": list(reversed(EXPECTED))}
    assert results({"expected_kql": "T | summarize n = count() by State", "generated_kql": "T", **rows}).score == 1.0
    sorted_ = results({"expected_kql": "T | summarize n = count() by State | sort by n", "generated_kql": "T", **rows})
    assert sorted_.score == 0.0
    assert sorted_.details["ordered"] is True


def test_metric_f1_mode() -> None:
    item = {"expected_kql": "T", "generated_kql": "T", "expected_results": EXPECTED, "generated_results": EXPECTED[:2]}
    assert results(item, mode="f1").score == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert results(item, mode="recall").score == 0.5


def test_must_match_blocks_the_pass_when_the_results_differ() -> None:
    """kql_strict: results known on both sides and different -> a pass blocker, whatever the score."""
    item = {"expected_kql": "T", "generated_kql": "T", "expected_results": EXPECTED, "generated_results": EXPECTED + [{"State": "OHIO", "n": 1}]}
    strict = results(item, mode="f1", must_match=True)
    assert strict.status == "ok" and strict.score == pytest.approx(2 * 4 / 9)
    assert strict.pass_blocker == "the results differ from the expected results (f1 0.889)"
    assert results(item, mode="f1").pass_blocker is None  # the design's kql suite keeps its formula
    same = {**item, "generated_results": list(reversed(EXPECTED))}
    assert results(same, mode="f1", must_match=True).pass_blocker is None


def test_generated_error_scores_zero() -> None:
    result = results(
        {"expected_kql": "T", "generated_kql": "T | x", "generated_error": "Syntax error", "expected_results": EXPECTED}
    )
    assert (result.status, result.score, result.details["error"]) == ("ok", 0.0, "Syntax error")


def test_missing_results_skip_and_block_the_pass() -> None:
    """No results to compare: skipped, and the item cannot pass (no execution evidence)."""
    for item in (
        {"expected_kql": "T", "generated_kql": "T"},
        {"expected_kql": "T", "generated_kql": "T", "expected_results": EXPECTED},
    ):
        result = results(item)
        assert result.status == "skipped"
        assert result.pass_blocker == f"no execution evidence: {result.reason}"


def test_an_expected_error_is_never_the_generated_querys_fault() -> None:
    skipped = results({"expected_kql": "T", "generated_kql": "T", "expected_error": "boom", "generated_results": []})
    assert skipped.status == "skipped"
    assert skipped.reason == "the expected query did not execute (the item says: boom); nothing to compare with"
    assert skipped.pass_blocker.startswith("no execution evidence: the expected query did not execute")


def test_unparsable_expected_query_compares_rows_without_order() -> None:
    result = results(
        {"expected_kql": "T |", "generated_kql": "T", "expected_results": EXPECTED, "generated_results": EXPECTED[::-1]}
    )
    assert result.score == 1.0
    assert result.details["note"].startswith("row order ignored: the expected query does not parse")


@pytest.mark.parametrize("args", [{"mode": "precision"}, {"must_match": "yes"}, {"must_match": 1}, {"max_rows": 100}])
def test_bad_arguments_are_a_criteria_error(args: dict[str, Any]) -> None:
    with pytest.raises(CriteriaError):
        build_metric("kql.results_match", 3, args, "kql")
