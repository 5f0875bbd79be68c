"""numeric_close: a number read from the output within a tolerance of the reference."""

from __future__ import annotations

from typing import Any

import pytest

from assay.scoring.metrics.library.numeric import parse_number
from assay.scoring.metrics.registry import ComponentResult
from tests.scoring.metrics.library_items import args_error, score


@pytest.mark.parametrize(
    ("output", "number", "read_as"),
    [
        (42, 42.0, "number"),
        (2.5, 2.5, "number"),
        (" -3.5e2 ", -350.0, "whole output"),
        ("1,234,567.5", 1234567.5, "whole output"),
        ("The answer is 42.", 42.0, "only number"),
        ("From 3 apples and 4 pears we get 7 fruits", 7.0, "last of 3 numbers"),
        ("It costs $1,299.99 now", 1299.99, "only number"),
        ("COVID-19 cases", 19.0, "only number"),  # a hyphen after a word is not a minus sign
        ("area51 has 7", 7.0, "only number"),  # a number glued to a word is not an answer
        ("x = .5", 0.5, "only number"),
    ],
)
def test_parse_number(output: Any, number: float, read_as: str) -> None:
    assert parse_number(output) == (number, read_as)


@pytest.mark.parametrize("output", ["no digits here", "", True, None, float("nan"), {"a": "b"}])
def test_parse_number_finds_none(output: Any) -> None:
    assert parse_number(output)[0] is None


def test_numeric_close_against_expected_with_an_absolute_tolerance() -> None:
    result = score("numeric_close", {"abs_tol": 0.01}, output="The total is 10.004", expected="10")
    assert result == ComponentResult.ok(
        1.0, {"number": 10.004, "read_as": "only number", "expected": 10.0, "difference": pytest.approx(0.004)}
    )
    assert score("numeric_close", {"abs_tol": 0.01}, output="10.02", expected="10").score == 0.0


def test_numeric_close_with_a_relative_tolerance_or_exactly() -> None:
    assert score("numeric_close", {"rel_tol": 0.05}, output="104", expected="100").score == 1.0
    assert score("numeric_close", {"rel_tol": 0.05}, output="94", expected="100").score == 0.0
    # Either tolerance suffices (math.isclose).
    assert score("numeric_close", {"rel_tol": 0.01, "abs_tol": 5}, output="104", expected="100").score == 1.0
    assert score("numeric_close", {"abs_tol": 0}, output="100", expected="100.0").score == 1.0
    assert score("numeric_close", {"abs_tol": 0}, output="100.5", expected="100").score == 0.0


def test_numeric_close_against_a_constant_or_metadata() -> None:
    assert score("numeric_close", {"value": 3.14, "abs_tol": 0.01}, output="pi is about 3.1416").score == 1.0
    args = {"value": {"from": "metadata.answer"}, "abs_tol": 0}
    assert score("numeric_close", args, output="12", metadata={"answer": 12}).score == 1.0


def test_an_output_without_a_number_scores_zero_with_the_reason() -> None:
    result = score("numeric_close", {"abs_tol": 1}, output="I cannot say.", expected="5")
    assert result == ComponentResult.ok(0.0, {"error": "no number in the output", "expected": 5.0})


def test_a_missing_or_non_numeric_reference() -> None:
    skipped = score("numeric_close", {"abs_tol": 1}, output="5")
    assert (skipped.status, skipped.reason) == ("skipped", "the item has no expected")
    failed = score("numeric_close", {"abs_tol": 1}, output="5", expected="five")
    assert (failed.status, failed.reason) == ("failed", "expected must be a number, got 'five'")
    flag = score("numeric_close", {"value": {"from": "metadata.n"}, "abs_tol": 1}, output="1", metadata={"n": True})
    assert (flag.status, flag.reason) == ("failed", "metadata.n must be a number, got true")


def test_numeric_close_args_are_checked() -> None:
    assert args_error("numeric_close", {}).endswith("args: give abs_tol, rel_tol or both (0 for an exact match)")
    assert "args.abs_tol: Input should be greater than or equal to 0" in args_error("numeric_close", {"abs_tol": -1})
    assert "args.rel_tol: Input should be a finite number" in args_error("numeric_close", {"rel_tol": float("inf")})
    assert "args.value" in args_error("numeric_close", {"value": "many", "abs_tol": 1})
