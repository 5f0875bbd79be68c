"""list_f1: F1 between a list in the output and a reference list."""

from __future__ import annotations

import pytest

from assay.scoring.metrics.registry import ComponentResult
from tests.scoring.metrics.library_items import args_error, score


def test_set_f1_against_expected() -> None:
    result = score("list_f1", output='["search", "lookup", "search"]', expected='["search", "calculator"]')
    # Sets: {search, lookup} vs {search, calculator}: P 1/2, R 1/2.
    assert result == ComponentResult.ok(0.5, {"precision": 0.5, "recall": 0.5, "missing": ["calculator"], "extra": ["lookup"]})


def test_list_mode_counts_each_copy_and_ignores_order() -> None:
    result = score("list_f1", {"mode": "list"}, output=["b", "a", "a"], expected='["a", "b", "b"]')
    # Multisets: matched a, b (2 of 3 each way).
    assert result.score == pytest.approx(2 / 3)
    assert result.details == {"precision": pytest.approx(2 / 3), "recall": pytest.approx(2 / 3), "missing": ["b"], "extra": ["a"]}
    assert score("list_f1", {"mode": "list"}, output=["a", "b"], expected='["b", "a"]').score == 1.0


def test_a_list_inside_the_output_and_a_constant_reference() -> None:
    output = {"calls": [{"tool": "search"}, {"tool": "lookup"}], "tools": ["search", "lookup"]}
    assert score("list_f1", {"path": "tools", "expected": ["lookup", "search"]}, output=output).score == 1.0
    # Elements may be any JSON value; objects compare as JSON.
    args = {"path": "calls", "expected": [{"tool": "search"}]}
    assert score("list_f1", args, output=output).details["extra"] == [{"tool": "lookup"}]


def test_case_insensitive_strings() -> None:
    assert score("list_f1", {"case_sensitive": False}, output=["Search"], expected='["search"]').score == 1.0
    assert score("list_f1", output=["Search"], expected='["search"]').score == 0.0


def test_empty_lists() -> None:
    assert score("list_f1", output=[], expected="[]") == ComponentResult.ok(
        1.0, {"precision": 1.0, "recall": 1.0, "missing": [], "extra": []}
    )
    assert score("list_f1", output=["a"], expected="[]").score == 0.0
    assert score("list_f1", output=[], expected='["a"]').score == 0.0


@pytest.mark.parametrize(
    ("args", "output", "error"),
    [
        ({}, "search, lookup", "the output is not valid JSON"),
        ({}, {"tools": []}, "the output is not a list"),
        ({"path": "tools"}, {"calls": []}, "path tools: $ has no key 'tools'"),
        ({"path": "tools"}, {"tools": "search"}, "the value at tools is not a list"),
    ],
)
def test_an_output_without_the_list_scores_zero_with_the_reason(args: dict, output: object, error: str) -> None:
    result = score("list_f1", args, output=output, expected='["a"]')
    assert result.score == 0.0 and result.details["error"].startswith(error)


def test_a_missing_or_unusable_reference() -> None:
    skipped = score("list_f1", output=["a"])
    assert (skipped.status, skipped.reason) == ("skipped", "the item has no expected")
    not_json = score("list_f1", output=["a"], expected="a, b")
    assert not_json.status == "failed" and not_json.reason.startswith("expected must be a JSON list: ")
    not_list = score("list_f1", output=["a"], expected='{"a": 1}')
    assert (not_list.status, not_list.reason) == ("failed", 'expected must be a list, got {"a": 1}')


def test_list_f1_args_are_checked() -> None:
    assert "args.mode: Input should be 'set' or 'list'" in args_error("list_f1", {"mode": "bag"})
    assert "args.path: 'a..b' is not a path like a.b[0].c" in args_error("list_f1", {"path": "a..b"})
