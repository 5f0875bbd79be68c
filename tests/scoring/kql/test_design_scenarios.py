"""Design 000's three example scenarios, run end to end on an inline Traces table.

Both queries are executed offline (pinned now) to get the columns and rows the design's API would
receive; the three deterministic components are then scored as the default ``kql`` suite does.

Where our numbers differ from the design's illustrations, on purpose:

- Scenario 2: ``ago(1h)`` vs ``ago(60m)`` is the same predicate after normalisation, so semantic
  similarity is 1.0, not the design's 90%: an equivalent rewrite loses nothing.
- Scenario 3: semantic similarity is 0.45, not 80%: the table part (0.4) is lost entirely
  (AppTraces ≠ Traces), filters match (0.3), and aggregations {count(), by level} vs {count()}
  share one item of two (0.15). Results match is 0.0, not 30%: the generated rows carry no
  ``level`` column, so no expected row — a level with its count — is found.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from assay.scoring.kinds.kql import KqlItem
from assay.scoring.kql.execute import execute_kql
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import MetricContext

NOW = datetime(2024, 5, 1, 12, 0)
LEVELS = ["Info", "Info", "Warning", "Error", "Info", "Warning"]
TRACES = [
    {"timestamp": NOW - timedelta(minutes=9 * i + 2), "level": LEVELS[i % len(LEVELS)], "message": f"event {i}"}
    for i in range(12)  # the first 7 fall inside the last hour
]
TABLES = {"Traces": TRACES, "AppTraces": TRACES[:3]}
CTX = MetricContext(now=NOW)

COMPONENTS = {
    "schema_match": ("kql.schema_match", 3, {}),
    "semantic_similarity": ("kql.semantic_similarity", 1, {"tables": 0.4, "filters": 0.3, "aggregations": 0.3}),
    "results_match": ("kql.results_match", 3, {"mode": "recall"}),
}


def score(generated: str, expected: str) -> dict[str, Any]:
    generated_columns, generated_rows = execute_kql(generated, TABLES, NOW)
    expected_columns, expected_rows = execute_kql(expected, TABLES, NOW)
    item = KqlItem(
        prompt="How many traces per level in the last hour?",
        generated_kql=generated,
        expected_kql=expected,
        generated_columns=generated_columns,
        expected_columns=expected_columns,
        generated_results=generated_rows,
        expected_results=expected_rows,
    )
    return {
        name: build_metric(metric, version, args, "kql")(item, CTX) for name, (metric, version, args) in COMPONENTS.items()
    }


def test_scenario_1_perfect_match() -> None:
    query = "Traces | where timestamp > ago(1h) | summarize count() by level"
    results = score(query, query)
    assert {name: r.score for name, r in results.items()} == {
        "schema_match": 1.0,
        "semantic_similarity": 1.0,
        "results_match": 1.0,
    }
    assert results["results_match"].details["compared_rows"] == 3  # Info, Warning, Error


def test_scenario_2_minor_differences() -> None:
    results = score(
        "Traces | where timestamp > ago(1h) | project timestamp, level, message",
        "Traces | where timestamp > ago(60m) | project timestamp, level, message",
    )
    assert {name: r.score for name, r in results.items()} == {
        "schema_match": 1.0,
        "semantic_similarity": 1.0,  # the design says 90%; equivalent time units now lose nothing
        "results_match": 1.0,
    }
    assert results["results_match"].details["compared_rows"] == 7


def test_scenario_3_failed_query() -> None:
    results = score(
        "AppTraces | where timestamp > ago(1h) | summarize count()",
        "Traces | where timestamp > ago(1h) | summarize count() by level",
    )
    assert results["schema_match"].score == 0.5
    assert results["schema_match"].details["missing_columns"] == ["level"]
    semantic = results["semantic_similarity"]
    assert semantic.score == pytest.approx(0.45)
    assert semantic.details["parts"]["tables"] == {
        "score": 0.0,
        "weight": 0.4,
        "missing": ["Traces"],
        "extra": ["AppTraces"],
    }
    assert semantic.details["parts"]["aggregations"]["missing"] == ["by level"]
    assert results["results_match"].score == 0.0
    # With the design's LLM grade of 60%, the total is far below the 0.9 threshold.
    total = 0.25 * (sum(r.score for r in results.values()) + 0.6)
    assert total == pytest.approx(0.3875)
