"""The validity set: equivalent rewrites score 1.0, non-equivalent ones below it.

Also checks the labels themselves on the sample table (equivalent pairs return the same rows) and
documents where the design's split and its recall formula are fooled.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from assay.scoring.kinds.kql import KqlItem
from assay.scoring.kql import parse_query
from assay.scoring.kql.execute import OfflineTables
from assay.scoring.kql.results import compare_rows
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import MetricContext
from tests.scoring.kql.conftest import NOW
from tests.scoring.kql.validity_pairs import (
    EQUIVALENT,
    NOT_EQUIVALENT,
    PAIRS,
    ValidityPair,
)

CTX = MetricContext(now=datetime(2007, 1, 31))
STRICT = build_metric("kql.semantic_similarity", 1, {"strict": True}, "kql")
DESIGN = build_metric("kql.semantic_similarity", 1, {"tables": 0.4, "filters": 0.3, "aggregations": 0.3}, "kql")

# Rewrites that name an aggregate differently (`Count = count()` vs `count()`): the same values
# under another column name, which results match (and schema match) align by their values.
RENAMES_A_COLUMN = {"aggregation alias", "alias used by sort", "default aggregate name in filter"}


def semantic(metric: Any, pair: ValidityPair) -> float:
    result = metric(KqlItem(prompt="p", expected_kql=pair.expected, generated_kql=pair.rewrite), CTX)
    assert result.status == "ok"
    return result.score


def test_the_set_is_large_enough() -> None:
    assert len(PAIRS) >= 30
    assert len(EQUIVALENT) >= 15 and len(NOT_EQUIVALENT) >= 15
    assert len({p.name for p in PAIRS}) == len(PAIRS)


@pytest.mark.parametrize("pair", EQUIVALENT, ids=lambda p: p.name)
def test_equivalent_rewrites_score_one(pair: ValidityPair) -> None:
    assert semantic(STRICT, pair) == 1.0
    assert semantic(DESIGN, pair) == 1.0


@pytest.mark.parametrize("pair", NOT_EQUIVALENT, ids=lambda p: p.name)
def test_non_equivalent_rewrites_score_below_one_under_strict(pair: ValidityPair) -> None:
    assert semantic(STRICT, pair) < 1.0


@pytest.mark.parametrize("pair", NOT_EQUIVALENT, ids=lambda p: p.name)
def test_the_design_split_is_blind_exactly_to_sort_take_join_kind_and_projection(pair: ValidityPair) -> None:
    assert (semantic(DESIGN, pair) == 1.0) is pair.design_blind


@pytest.fixture(scope="module")
def database(storm_tables: dict[str, list[dict[str, Any]]]) -> Any:
    with OfflineTables(storm_tables) as db:
        yield db


@pytest.mark.parametrize("pair", EQUIVALENT, ids=lambda p: p.name)
def test_equivalent_pairs_return_the_same_rows(database: OfflineTables, pair: ValidityPair) -> None:
    expected_columns, expected_rows = database.run(pair.expected, NOW)
    columns, rows = database.run(pair.rewrite, NOW)
    assert expected_rows, "a pair that returns nothing proves nothing"
    ordered = parse_query(pair.expected).ordered
    assert (columns != expected_columns) is (pair.name in RENAMES_A_COLUMN)
    score, details = compare_rows(
        expected_rows, rows, ordered=ordered, mode="f1", expected_columns=expected_columns, generated_columns=columns
    )
    assert score == 1.0, details
    assert bool(details["renamed_columns"]) is (pair.name in RENAMES_A_COLUMN)


def test_design_recall_is_fooled_by_a_dropped_filter(database: OfflineTables) -> None:
    """Design 000's results formula only asks whether the expected rows are there, so a query that
    dropped a filter (and returns a superset) scores 1.0; with its semantic 0.85 and a generous
    judge, it passes the design's 0.9 threshold. ``kql_strict``'s f1 catches it."""
    expected = 'StormEvents | where State == "TEXAS" and EventType == "Flood" | project StartTime, State, EventType'
    dropped = 'StormEvents | where State == "TEXAS" | project StartTime, State, EventType'
    _, expected_rows = database.run(expected, NOW)
    _, rows = database.run(dropped, NOW)
    assert 0 < len(expected_rows) < len(rows)

    recall, _ = compare_rows(expected_rows, rows, ordered=False, mode="recall")
    f1, _ = compare_rows(expected_rows, rows, ordered=False, mode="f1")
    precision = len(expected_rows) / len(rows)
    assert recall == 1.0
    assert f1 == pytest.approx(2 * precision / (1 + precision))

    semantic_score = semantic(DESIGN, ValidityPair("dropped", expected, dropped, False))
    assert semantic_score == pytest.approx(0.85)
    design_total = 0.25 * (1.0 + semantic_score + recall + 1.0)  # schema 1.0, judge 1.0
    assert design_total >= 0.9
