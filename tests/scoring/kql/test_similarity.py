"""kql.semantic_similarity: the Jaccard parts, their weights, and the metric's failure modes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds.kql import KqlItem
from assay.scoring.kql import parse_query
from assay.scoring.kql.similarity import SimilarityWeights, compare_structures, jaccard
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import ComponentResult, MetricContext

CTX = MetricContext(now=datetime(2007, 1, 31))


def similarity(expected: str, generated: str, **args: Any) -> ComponentResult:
    metric = build_metric("kql.semantic_similarity", 1, args, "kql")
    return metric(KqlItem(prompt="p", expected_kql=expected, generated_kql=generated), CTX)


def test_jaccard() -> None:
    assert jaccard(frozenset("ab"), frozenset("bc")) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert jaccard(frozenset("a"), frozenset()) == 0.0


def test_identical_queries_score_one() -> None:
    query = 'T | where a == 1 | summarize count() by k'
    assert similarity(query, query).score == 1.0
    assert similarity(query, query, strict=True).score == 1.0


def test_a_dropped_filter_costs_half_the_filter_part() -> None:
    result = similarity(
        "T | where a == 1 and b == 2 | summarize count() by k", "T | where a == 1 | summarize count() by k"
    )
    assert result.score == pytest.approx(0.4 * 1 + 0.3 * 0.5 + 0.3 * 1)
    assert result.details["parts"]["filters"] == {"score": 0.5, "weight": 0.3, "missing": ["b == 2"], "extra": []}


def test_wrong_table_loses_the_table_part() -> None:
    result = similarity("T | count", "U | count")
    assert result.score == pytest.approx(0.6)
    assert result.details["parts"]["tables"]["missing"] == ["T"]
    assert result.details["parts"]["tables"]["extra"] == ["U"]


def test_group_by_keys_count_in_the_aggregation_part() -> None:
    result = similarity("T | summarize count() by k", "T | summarize count() by j")
    # {count(), by k} vs {count(), by j}: 1 shared of 3
    assert result.score == pytest.approx(0.4 + 0.3 + 0.3 / 3)
    assert result.details["parts"]["aggregations"]["missing"] == ["by k"]


def test_strict_weighs_sort_take_join_kind_and_projection() -> None:
    flipped = similarity("T | sort by x desc | take 5", "T | sort by x asc | take 5", strict=True)
    assert flipped.score == pytest.approx((1.0 + 0.1 * 0 + 0.1 + 0.05 + 0.1) / 1.35)
    assert flipped.details["parts"]["sort"]["missing"] == ["1. x desc"]
    assert flipped.details["parts"]["sort"]["extra"] == ["1. x asc"]

    take = similarity("T | take 5", "T | take 10", strict=True)
    assert take.score == pytest.approx(1.25 / 1.35)

    join = similarity("T | join kind=inner U on k", "T | join kind=leftouter U on k", strict=True)
    assert join.score == pytest.approx(1.3 / 1.35)

    projection = similarity("T | project a, b", "T | project a", strict=True)
    assert projection.score == pytest.approx((1.35 - 0.1 + 0.1 * 0.5) / 1.35)


def test_without_strict_those_differences_are_invisible() -> None:
    assert similarity("T | sort by x desc | take 5", "T | sort by x asc | take 10").score == 1.0
    assert "sort" not in similarity("T | take 5", "T | take 5").details["parts"]


def test_custom_weights() -> None:
    result = similarity("A | join B on k", "A | count", tables=1.0, filters=0.0, aggregations=0.0)
    assert result.score == pytest.approx(0.5)


def test_compare_structures_reports_every_part() -> None:
    score, details = compare_structures(parse_query("T"), parse_query("T"), SimilarityWeights(strict=True))
    assert score == 1.0
    assert list(details["parts"]) == ["tables", "filters", "aggregations", "sort", "take", "join_kind", "projection"]


@pytest.mark.parametrize(
    "args",
    [
        {"tables": -0.1},
        {"tables": 0, "filters": 0, "aggregations": 0},
        {"sort": "high", "strict": True},
        {"colour": 1},
    ],
)
def test_bad_weights_are_a_criteria_error(args: dict[str, Any]) -> None:
    with pytest.raises(CriteriaError):
        build_metric("kql.semantic_similarity", 1, args, "kql")


def test_an_unparsable_generated_query_is_a_scored_failure() -> None:
    result = similarity("T | count", "T | summarize count( by")
    assert result.status == "ok"
    assert result.score == 0.0
    assert result.details["reason"] == "the generated query does not parse"
    assert result.details["error"].startswith("could not parse KQL at 1:")


def test_an_unparsable_expected_query_fails_the_component() -> None:
    result = similarity("T | where", "T | count")
    assert result.status == "failed"
    assert result.reason is not None and result.reason.startswith("the expected query does not parse: could not parse KQL")
