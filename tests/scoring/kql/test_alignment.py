"""Renamed columns: an expected column missing by name is matched to a generated column by its values,
and only when the values are evidence that it is the same column."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from assay.scoring.kinds.kql import KqlItem
from assay.scoring.kql.results import align_columns, compare_rows
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import MetricContext

CTX = MetricContext(now=datetime(2007, 1, 31))
SCHEMA = build_metric("kql.schema_match", 3, {}, "kql")
RESULTS = build_metric("kql.results_match", 3, {"mode": "f1"}, "kql")

PER_STATE = [{"State": "TEXAS", "count_": 4}, {"State": "IOWA", "count_": 2}, {"State": "OHIO", "count_": 3}]


def renamed(rows: list[dict[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    return [{new if k == old else k: v for k, v in row.items()} for row in rows]


def align(expected: list[dict[str, Any]], generated: list[dict[str, Any]]) -> dict[str, str]:
    return align_columns(list(expected[0]) if expected else [], expected, list(generated[0]) if generated else [], generated)


def test_an_alias_is_matched_by_its_values() -> None:
    generated = renamed(PER_STATE, "count_", "Count")
    assert align(PER_STATE, generated) == {"count_": "Count"}
    score, details = compare_rows(PER_STATE, list(reversed(generated)), ordered=False, mode="f1")
    assert score == 1.0 and details["renamed_columns"] == {"count_": "Count"}


def test_a_column_with_other_values_is_not_matched() -> None:
    # A wrong aggregation under its own default name: different values, no match.
    wrong = [{"State": "TEXAS", "max_Damage": 9}, {"State": "IOWA", "max_Damage": 2}, {"State": "OHIO", "max_Damage": 3}]
    assert align(PER_STATE, wrong) == {}
    score, details = compare_rows(PER_STATE, wrong, ordered=False, mode="f1")
    assert score == 0.0 and details["renamed_columns"] == {}


def test_same_values_with_another_pairing_are_matched_but_the_rows_still_differ() -> None:
    # The column holds the same multiset of values, but next to the wrong states.
    shuffled = [{"State": "TEXAS", "n": 2}, {"State": "IOWA", "n": 3}, {"State": "OHIO", "n": 4}]
    assert align(PER_STATE, shuffled) == {"count_": "n"}
    assert compare_rows(PER_STATE, shuffled, ordered=False, mode="f1")[0] == 0.0


def test_a_constant_column_is_never_matched() -> None:
    # count() and dcount(Source) per state are all 1 here: they agree by coincidence.
    expected = [{"State": s, "count_": 1} for s in ("TEXAS", "IOWA", "OHIO")]
    generated = [{"State": s, "dcount_Source": 1} for s in ("TEXAS", "IOWA", "OHIO")]
    assert align(expected, generated) == {}
    assert compare_rows(expected, generated, ordered=False)[0] == 0.0
    all_null = [{"State": s, "x": None} for s in ("TEXAS", "IOWA")]
    assert align(all_null, renamed(all_null, "x", "y")) == {}


@pytest.mark.parametrize("value", [0, 1, 1.0, None, True, False, ""])
def test_a_trivial_single_value_is_never_matched(value: Any) -> None:
    assert align([{"Count": value}], [{"count_": value}]) == {}


def test_a_single_telling_value_is_matched() -> None:
    # `| count` vs `summarize Total = count()`: one row, 300 storms.
    assert align([{"Count": 300}], [{"Total": 300}]) == {"Count": "Total"}
    assert align([{"Count": 300}], [{"Total": 300.0}]) == {"Count": "Total"}  # numbers by value
    assert align([{"Count": 300}], [{"Total": "300"}]) == {}  # text is not a number
    assert align([{"Count": 300}], [{"Total": 299}]) == {}


def test_results_of_different_sizes_are_not_matched() -> None:
    assert align(PER_STATE, renamed(PER_STATE, "count_", "Count")[:2]) == {}
    assert align(PER_STATE, []) == {} and align([], []) == {}


def test_a_generated_column_named_like_another_expected_column_is_not_taken() -> None:
    # `n` is missing; `State` is a column of its own, even if its values were to agree.
    expected = [{"State": "a", "n": "a"}, {"State": "b", "n": "b"}]
    generated = [{"State": "x", "m": "y"}, {"State": "y", "m": "x"}]
    assert align_columns(["State", "n"], expected, ["State", "m"], generated) == {}


def test_ambiguity_prefers_the_same_position_then_the_nearest() -> None:
    expected = [{"a": 1, "b": 5, "c": 5}, {"a": 2, "b": 6, "c": 6}]
    generated = [{"x": 1, "y": 5, "z": 5}, {"x": 2, "y": 6, "z": 6}]
    assert align_columns(["a", "b", "c"], expected, ["x", "y", "z"], generated) == {"a": "x", "b": "y", "c": "z"}
    assert align_columns(["a", "c"], expected, ["z", "x", "y"], generated) == {"a": "x", "c": "z"}
    # Each generated column is used once: two expected columns, one candidate.
    assert align_columns(["b", "c"], expected, ["y"], generated) == {"b": "y"}


def test_a_generated_column_that_some_row_lacks_is_not_matched() -> None:
    assert align_columns(["n"], [{"n": 1}, {"n": 2}], ["m"], [{"m": 1}, {"k": 2}]) == {}


def test_alignment_can_be_switched_off() -> None:
    score, details = compare_rows(PER_STATE, renamed(PER_STATE, "count_", "Count"), ordered=False, align=False)
    assert score == 0.0 and "renamed_columns" not in details


def test_ordered_comparison_reads_the_renamed_column() -> None:
    generated = renamed(PER_STATE, "count_", "Events")
    assert compare_rows(PER_STATE, generated, ordered=True, mode="f1")[0] == 1.0
    assert compare_rows(PER_STATE, generated[::-1], ordered=True, mode="f1")[0] == pytest.approx(1 / 3)


# --- the metrics, on results the item supplies --------------------------------------------------------


def item(expected: list[dict[str, Any]], generated: list[dict[str, Any]], **extra: Any) -> KqlItem:
    return KqlItem(
        prompt="p",
        expected_kql="T | summarize count() by State",
        generated_kql="T | summarize Count = count() by State",
        expected_results=expected,
        generated_results=generated,
        **extra,
    )


def test_schema_counts_a_renamed_column_as_present() -> None:
    it = item(PER_STATE, renamed(PER_STATE, "count_", "Count"))
    schema = SCHEMA(it, CTX)
    assert schema.score == 1.0
    assert schema.details["missing_columns"] == [] and schema.details["extra_columns"] == []
    assert schema.details["renamed_columns"] == {"count_": "Count"} and "renamed" in schema.details["note"]
    results = RESULTS(it, CTX)
    assert results.score == 1.0 and results.details["renamed_columns"] == {"count_": "Count"}


def test_schema_without_a_match_counts_the_column_missing() -> None:
    wrong = [{"State": r["State"], "Count": r["count_"] * 10} for r in PER_STATE]
    schema = SCHEMA(item(PER_STATE, wrong), CTX)
    assert schema.score == 0.5
    assert schema.details["missing_columns"] == ["count_"] and schema.details["extra_columns"] == ["Count"]
    assert schema.details["renamed_columns"] == {} and "note" not in schema.details


def test_schema_with_columns_but_no_rows_cannot_match() -> None:
    it = KqlItem(
        prompt="p",
        expected_kql="T",
        generated_kql="T",
        expected_columns=["State", "count_"],
        generated_columns=["State", "Count"],
    )
    schema = SCHEMA(it, CTX)
    assert schema.score == 0.5 and schema.details["renamed_columns"] == {}
