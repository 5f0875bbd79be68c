"""Bounded work per item (invariant 11): each library metric's bound refuses the inputs of the
security review (issue 29) before the metric runs, with the sizes in the reason, and an input
within the bound scores as before."""

from __future__ import annotations

import json

import pytest

from assay.scoring.metrics import registry
from assay.scoring.metrics.catalog import build_metric, registered_metrics
from assay.scoring.metrics.registry import ComponentResult, register_metric
from assay.scoring.metrics.work import Work, WorkBound
from tests.scoring.metrics.library_items import CTX, Item, args_error, score


def _refused(result: ComponentResult, unit: str, amount: int, limit: int) -> str:
    assert result.status == "failed", result
    assert result.details["work_bound"]["unit"] == unit
    assert result.details["work_bound"]["amount"] == amount
    assert result.details["work_bound"]["limit"] == limit
    assert result.reason is not None and f"= {amount:,} {unit}, over the bound of {limit:,} {unit} per item" in result.reason
    return result.reason


# --- the mechanism ---------------------------------------------------------------------------------


def test_every_bound_is_checked_before_the_metric_and_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    registered_metrics()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    calls: list[str] = []

    def factory(**args: object) -> object:
        def run(item: Item, ctx: object) -> ComponentResult:
            calls.append(item.output)
            return ComponentResult.ok(1.0)

        return run

    def measure(what: str) -> object:
        def count(args: object, item: Item) -> Work:
            calls.append(what)
            return Work(len(item.output) if what == "chars" else item.output.count(" "), what)

        return count

    bounds = (WorkBound("chars", 10, measure("chars")), WorkBound("spaces", 1, measure("spaces")))
    register_metric("bounded_test", version=1, kinds=("generic",), factory=factory, bounds=bounds)
    metric = build_metric("bounded_test", 1, {}, "generic")
    assert metric(Item(output="a b"), CTX) == ComponentResult.ok(1.0)
    assert calls == ["chars", "spaces", "a b"]
    calls.clear()
    assert metric(Item(output="x" * 11), CTX).reason == "too much work for one item: chars = 11 chars, over the bound of 10 chars per item"
    assert calls == ["chars"]  # the first bound refused it: neither the second nor the metric ran
    calls.clear()
    assert metric(Item(output="a b c"), CTX).details["work_bound"]["unit"] == "spaces"
    assert calls == ["chars", "spaces"]


def test_a_bound_needs_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="limit is an integer >= 1"):
        WorkBound("cells", 0, lambda args, item: Work(0, ""))


# --- ROUGE-L: the cap is per item, summed over the references ---------------------------------------


def test_rouge_l_counts_every_reference_of_an_item() -> None:
    # The review's input: 20 references of 2,000 tokens against a 2,000-token output (84 KB, 12 s).
    reference = "word " * 2_000
    result = score("rouge_l", {"reference": [reference] * 20}, output="word " * 2_000)
    reason = _refused(result, "LCS cells", 2_000 * 40_000, 4_000_000)
    assert "2,000 output tokens x 40,000 reference tokens (20 references)" in reason
    # Two references of 1,000 tokens against 2,000: 4,000,000 cells, within the bound.
    assert score("rouge_l", {"reference": ["word " * 1_000] * 2}, output="word " * 2_000).status == "ok"


def test_rouge_l_within_its_bound_scores_as_before() -> None:
    result = score("rouge_l", output="the cat sat on the mat", expected="the cat is on the mat")
    assert result.score == pytest.approx(5 / 6)


# --- json_schema: uniqueItems pairs and validation steps --------------------------------------------

UNIQUE = {"type": "array", "uniqueItems": True}


def test_json_schema_unique_items_over_many_objects_is_refused() -> None:
    # The review's input: 4,000 objects (51 KB) took 10-11 s of pairwise comparisons.
    output = json.dumps([{"n": n} for n in range(4_000)])
    result = score("json_schema", {"schema": UNIQUE}, output=output)
    reason = _refused(result, "uniqueItems pairs", 4_000 * 3_999 // 2, 400_000)
    assert "the longest 4,000 elements" in reason


def test_json_schema_unique_items_within_the_bound_still_validates() -> None:
    distinct = json.dumps([{"n": n} for n in range(800)])
    assert score("json_schema", {"schema": UNIQUE}, output=distinct).score == 1.0
    repeated = json.dumps([{"n": 1}, {"n": 2}, {"n": 1}])
    result = score("json_schema", {"schema": UNIQUE}, output=repeated)
    assert result.score == 0.0 and result.details["error_count"] == 1


def test_json_schema_unique_items_over_sortable_values_costs_no_pairs() -> None:
    # Strings or numbers are sorted, not compared in pairs: a long array of them is within the bound.
    assert score("json_schema", {"schema": UNIQUE}, output=json.dumps([f"s{n}" for n in range(20_000)])).score == 1.0


def test_json_schema_pairs_are_counted_only_when_the_schema_asks_for_unique_items() -> None:
    output = json.dumps([{"n": n} for n in range(4_000)])
    assert score("json_schema", {"schema": {"type": "array"}}, output=output).score == 1.0


def test_json_schema_validation_steps_are_output_values_times_schema_values() -> None:
    schema = {"type": "array", "items": {"anyOf": [{"const": n} for n in range(50)]}}  # 104 values
    result = score("json_schema", {"schema": schema}, output=json.dumps([1000] * 10_000))
    reason = _refused(result, "validation steps", 10_001 * 104, 500_000)
    assert "10,001 output JSON values x 104 schema values" in reason


# --- regex_match: pattern size and RE2 steps ---------------------------------------------------------


def test_regex_match_refuses_a_long_per_item_pattern_before_compiling_it() -> None:
    # The review's input: a 5 KB pattern of [a-j]{1,1000} per item, about 1.5 s per 200 KB output.
    pattern = "[a-j]{1,1000}" * 400
    result = score("regex_match", {"pattern": {"from": "metadata.pattern"}}, output="abc", metadata={"pattern": pattern})
    reason = _refused(result, "pattern characters", len(pattern), 1_000)
    assert f"a pattern of {len(pattern):,} characters" in reason


def test_regex_match_refuses_a_short_pattern_whose_program_times_the_output_is_too_much() -> None:
    pattern = "[a-j]{1,1000}" * 5 + "k"  # 66 characters, a 10,000-instruction program: 14 s on 200 KB
    output = "abcdefghij" * 20_000
    result = score("regex_match", {"pattern": pattern}, output=output)
    reason = _refused(result, "RE2 steps", 10_000 * 200_000, 100_000_000)
    assert "a pattern program of 10,000 instructions x 200,000 output characters" in reason
    # The same pattern on a short output runs.
    assert score("regex_match", {"pattern": pattern}, output="abcdefghij" * 10).score == 0.0


def test_regex_match_refuses_a_long_constant_pattern_when_the_suite_is_resolved() -> None:
    assert "a pattern of 1,001 characters is longer than 1,000" in args_error("regex_match", {"pattern": "a" * 1_001})


def test_regex_match_within_its_bounds_scores_as_before() -> None:
    result = score("regex_match", {"pattern": r"\d{4}-\d{2}"}, output="on 2026-01 it")
    assert result == ComponentResult.ok(1.0, {"match": "2026-01"})


# --- contains_all / contains_any, levenshtein_ratio, bleu / chrf --------------------------------------


def test_contains_all_refuses_many_texts_over_a_long_output() -> None:
    values = [f"needle {n}" for n in range(10_000)]
    result = score("contains_all", {"values": {"from": "metadata.values"}}, output="x" * 200_000, metadata={"values": values})
    _refused(result, "characters searched", 10_000 * 200_000, 1_000_000_000)
    assert score("contains_all", {"values": ["a", "b"]}, output="a b").score == 1.0


def test_levenshtein_ratio_refuses_long_texts_against_many_references() -> None:
    result = score("levenshtein_ratio", {"reference": ["y" * 200_000] * 2}, output="x" * 200_000)
    _refused(result, "character pairs", 200_000 * 400_000, 40_000_000_000)
    assert score("levenshtein_ratio", output="x" * 200_000, expected="x" * 200_000).score == 1.0


@pytest.mark.parametrize("name", ["bleu", "chrf"])
def test_ngram_metrics_refuse_an_output_counted_against_many_references(name: str) -> None:
    result = score(name, {"reference": ["the cat sat"] * 7}, output="word " * 40_000)
    _refused(result, "characters counted", 200_000 * 7 + 77, 1_200_000)
    assert score(name, output="the cat sat on the mat", expected="the cat sat on the mat").score == pytest.approx(1.0)
