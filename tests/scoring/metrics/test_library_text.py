"""Text metrics: exact match, contains family, starts with, regex (RE2), length bounds."""

from __future__ import annotations

import time

import pytest

from assay.scoring.metrics.registry import ComponentResult
from tests.scoring.metrics.library_items import args_error, score

# --- exact_match -----------------------------------------------------------------------------------


def test_exact_match_compares_the_output_with_expected_by_default() -> None:
    assert score("exact_match", output="Paris", expected="Paris") == ComponentResult.ok(1.0, {"match": True})
    assert score("exact_match", output="Paris ", expected="Paris") == ComponentResult.ok(0.0, {"match": False})
    assert score("exact_match", output="paris", expected="Paris").score == 0.0


@pytest.mark.parametrize(
    ("args", "output", "expected", "match"),
    [
        ({"case_sensitive": False}, "PARIS", "paris", True),
        ({"case_sensitive": False}, "Straße", "STRASSE", True),  # casefold, not lower
        ({"ignore_whitespace": True}, "  New \n York\t", "New York", True),
        ({"ignore_whitespace": True}, "NewYork", "New York", False),  # runs become one space, not none
        ({"ignore_punctuation": True}, "Paris!", "Paris", True),
        ({"ignore_punctuation": True}, "«Paris»,", "Paris", True),  # Unicode punctuation too
        ({"ignore_punctuation": True, "ignore_whitespace": True}, "Paris .", "Paris", True),
        ({"ignore_punctuation": True}, "Paris", "París", False),  # accents are letters
    ],
)
def test_exact_match_normalisation(args: dict, output: str, expected: str, match: bool) -> None:
    assert score("exact_match", args, output=output, expected=expected).details == {"match": match}


def test_exact_match_against_a_constant_or_a_metadata_value() -> None:
    assert score("exact_match", {"value": "yes"}, output="yes").score == 1.0
    assert score("exact_match", {"value": {"from": "metadata.label"}}, output="spam", metadata={"label": "spam"}).score == 1.0


def test_exact_match_without_expected_is_skipped() -> None:
    result = score("exact_match", output="Paris")
    assert (result.status, result.reason) == ("skipped", "the item has no expected")


def test_a_json_output_is_compared_as_its_json_text() -> None:
    assert score("exact_match", {"value": '{"a": 1, "b": [true]}'}, output={"b": [True], "a": 1}).score == 1.0


# --- contains family -------------------------------------------------------------------------------


def test_contains_and_not_contains() -> None:
    assert score("contains", {"value": "refund"}, output="We will refund you.") == ComponentResult.ok(1.0, {"found": True})
    assert score("contains", {"value": "Refund"}, output="We will refund you.").score == 0.0
    assert score("contains", {"value": "Refund", "case_sensitive": False}, output="We will refund you.").score == 1.0
    assert score("not_contains", {"value": "sorry"}, output="We will refund you.") == ComponentResult.ok(1.0, {"found": False})
    assert score("not_contains", {"value": "SORRY", "case_sensitive": False}, output="Sorry!").score == 0.0
    assert score("contains", {"value": {"from": "expected"}}, output="It is Paris.", expected="Paris").score == 1.0


def test_contains_all_and_any_report_what_is_missing_or_found() -> None:
    output = "Call us or email support."
    assert score("contains_all", {"values": ["Call", "email"]}, output=output) == ComponentResult.ok(1.0, {"missing": []})
    assert score("contains_all", {"values": ["call"]}, output=output).details == {"missing": ["call"]}
    assert score("contains_all", {"values": ["Call", "fax", "phone"]}, output=output) == ComponentResult.ok(0.0, {"missing": ["fax", "phone"]})
    assert score("contains_any", {"values": ["fax", "email"]}, output=output) == ComponentResult.ok(1.0, {"found": ["email"]})
    assert score("contains_any", {"values": ["FAX", "EMAIL"], "case_sensitive": False}, output=output).details == {"found": ["EMAIL"]}
    assert score("contains_any", {"values": ["fax"]}, output=output) == ComponentResult.ok(0.0, {"found": []})
    per_item = {"values": {"from": "metadata.must"}}
    assert score("contains_all", per_item, output=output, metadata={"must": ["us", "support"]}).score == 1.0


def test_contains_args_are_checked() -> None:
    assert args_error("contains", {}) == "component 'comp': metric 'contains': args.value: Field required"
    assert "an empty string is contained in every output" in args_error("contains", {"value": ""})
    assert "args.values: give at least one text" in args_error("contains_all", {"values": []})
    assert "an empty string is contained in every output; remove it" in args_error("contains_any", {"values": ["a", ""]})
    assert "args.case_sensitive: Input should be a valid boolean" in args_error("not_contains", {"value": "a", "case_sensitive": "perhaps"})


def test_starts_with() -> None:
    assert score("starts_with", {"value": "Yes"}, output="Yes, it is.") == ComponentResult.ok(1.0, {"starts_with": True})
    assert score("starts_with", {"value": "Yes"}, output=" Yes, it is.").score == 0.0  # leading whitespace counts
    assert score("starts_with", {"value": "yes", "case_sensitive": False}, output="YES!").score == 1.0
    assert score("starts_with", {"value": "Yes"}, output="No").score == 0.0


# --- regex_match -----------------------------------------------------------------------------------


def test_regex_match_searches_anywhere_and_keeps_the_match() -> None:
    args = {"pattern": r"\[\d+\]"}
    assert score("regex_match", args, output="Refunds take 5 days [2].") == ComponentResult.ok(1.0, {"match": "[2]"})
    assert score("regex_match", args, output="No citation.") == ComponentResult.ok(0.0, {"match": None})
    assert score("regex_match", {"pattern": "^yes$"}, output="yes, sure").score == 0.0
    assert score("regex_match", {"pattern": "^YES", "case_sensitive": False}, output="yes, sure").score == 1.0
    assert len(score("regex_match", {"pattern": "a+"}, output="a" * 1000).details["match"]) == 200


def test_a_catastrophic_pattern_returns_fast() -> None:
    # (a+)+$ backtracks exponentially in a backtracking engine on "aaa...b"; RE2 is linear.
    # CPU time, not wall time: on a loaded machine the wall clock also counts other processes' turns.
    started = time.process_time()
    result = score("regex_match", {"pattern": "(a+)+$"}, output="a" * 100_000 + "b")
    assert time.process_time() - started < 1.0
    assert result == ComponentResult.ok(0.0, {"match": None})


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),  # backreference
        ("(?=a)b", "invalid perl operator: (?="),  # lookahead
        ("(unclosed", "missing ): (unclosed"),
    ],
)
def test_a_pattern_re2_cannot_compile_makes_the_suite_invalid(pattern: str, reason: str) -> None:
    message = args_error("regex_match", {"pattern": pattern})
    assert message.startswith("component 'comp': metric 'regex_match': args.pattern: not a valid RE2 pattern (")
    assert reason in message


def test_a_per_item_pattern_that_does_not_compile_fails_that_item() -> None:
    args = {"pattern": {"from": "metadata.pattern"}}
    assert score("regex_match", args, output="abc", metadata={"pattern": "b+"}).score == 1.0
    result = score("regex_match", args, output="abc", metadata={"pattern": "(?<=a)b"})
    assert result.status == "failed" and result.reason.startswith("metadata.pattern: not a valid RE2 pattern")


# --- length ----------------------------------------------------------------------------------------


def test_length_bounds_in_characters_and_words() -> None:
    assert score("length_chars", {"max": 5}, output="héllo") == ComponentResult.ok(1.0, {"length": 5})  # code points
    assert score("length_chars", {"min": 6}, output="héllo") == ComponentResult.ok(0.0, {"length": 5})
    assert score("length_chars", {"min": 1, "max": 3}, output="").score == 0.0
    assert score("length_words", {"min": 2, "max": 3}, output=" one\ttwo\nthree ") == ComponentResult.ok(1.0, {"length": 3})
    assert score("length_words", {"max": 2}, output="one two three").score == 0.0
    assert score("length_words", {"min": 0, "max": 0}, output="   ").score == 1.0


def test_length_args_are_checked() -> None:
    assert args_error("length_chars", {}).endswith("args: give min, max or both")
    assert args_error("length_words", {"min": 5, "max": 2}).endswith("args: min (5) is greater than max (2)")
    assert "args.min: Input should be greater than or equal to 0" in args_error("length_chars", {"min": -1})
    assert "args.max: Input should be a valid integer" in args_error("length_chars", {"max": "ten"})
