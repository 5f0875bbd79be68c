"""The two KQL suite files: the KQL scoring design's four components at 0.25 each, default and strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.scoring.metrics.catalog import build_metric
from assay.scoring.suites.loader import load_suite

CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.mark.parametrize("name", ["kql", "kql_strict"])
def test_four_equal_components(name: str) -> None:
    criteria = load_suite(CONFIG, name, env={}).criteria
    assert {n: c.weight for n, c in criteria.components.items()} == {
        "schema_match": 0.25,
        "semantic_similarity": 0.25,
        "results_match": 0.25,
        "llm_grading": 0.25,
    }
    assert criteria.judge_component == "llm_grading"
    assert criteria.threshold == 0.9
    for component in criteria.components.values():
        if component.metric is not None:
            build_metric(component.metric, component.version, component.args, "kql")


def test_default_suite_follows_the_design() -> None:
    components = load_suite(CONFIG, "kql", env={}).criteria.components
    assert components["semantic_similarity"].args == {"tables": 0.4, "filters": 0.3, "aggregations": 0.3}
    assert components["results_match"].args == {"mode": "recall"}


def test_strict_suite_adds_strict_semantics_and_f1() -> None:
    default = load_suite(CONFIG, "kql", env={})
    strict = load_suite(CONFIG, "kql_strict", env={})
    assert strict.name == "kql_strict"
    assert strict.criteria.components["semantic_similarity"].args["strict"] is True
    assert strict.criteria.components["results_match"].args == {"mode": "f1", "must_match": True}
    assert strict.criteria.judge == default.criteria.judge
    assert strict.criteria_hash != default.criteria_hash
