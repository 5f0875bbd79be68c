"""Dataset-backed KQL items: both queries run offline, errors and engine gaps told apart, the pass rule."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from assay.scoring.intake.datasets import make_table
from assay.scoring.kinds.kql import KIND, KqlItem
from assay.scoring.kql import offline
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import ComponentResult, MetricContext
from tests.conftest import REPO
from tests.scoring.kql.conftest import NOW

SCHEMA = build_metric("kql.schema_match", 3, {}, "kql")
RESULTS = build_metric("kql.results_match", 3, {"mode": "recall"}, "kql")
RESULTS_F1 = build_metric("kql.results_match", 3, {"mode": "f1"}, "kql")
SEMANTIC = build_metric("kql.semantic_similarity", 1, {}, "kql")
STRICT_SEMANTIC = build_metric("kql.semantic_similarity", 1, {"strict": True}, "kql")

S = "StormEvents"
EXAMPLES = REPO / "examples" / "kql_dataset_items.jsonl"
STORM_DIR = REPO / "examples" / "datasets" / "storm"


@pytest.fixture(autouse=True)
def fresh_caches():
    offline.clear()
    yield
    offline.clear()


@pytest.fixture
def ctx(storm_tables) -> MetricContext:
    # The score was created 30 days after the data's "now": an item that pins no now sees an empty week.
    return MetricContext(now=NOW + timedelta(days=30), dataset_loader=lambda _hash: storm_tables)


def item(generated: str, expected: str, **extra: Any) -> KqlItem:
    return KqlItem(prompt="p", generated_kql=generated, expected_kql=expected, dataset="h", now=NOW, **extra)


def both(it: KqlItem, ctx: MetricContext) -> tuple[ComponentResult, ComponentResult]:
    return SCHEMA(it, ctx), RESULTS(it, ctx)


def test_an_equivalent_rewrite_matches_on_the_dataset(ctx) -> None:
    it = item(
        f"{S} | where ago(72h) < StartTime | summarize count() by State",
        f"{S} | where StartTime > ago(3d) | summarize count() by State",
    )
    schema, results = both(it, ctx)
    assert schema.score == 1.0 and results.score == 1.0
    assert results.details["compared_rows"] == 4  # the 12 storms of the 3 days before NOW, in 4 states
    assert results.details["source"] == "offline" and results.details["now"] == NOW.isoformat()
    assert schema.details["expected_columns"] == ["State", "count_"]


def test_a_wrong_rewrite_is_caught_by_the_rows(ctx) -> None:
    it = item(
        f"{S} | where StartTime > ago(1d) | summarize count() by EventType",
        f"{S} | where StartTime > ago(1d) | summarize count() by State",
    )
    schema, results = both(it, ctx)
    assert schema.score == 0.5 and schema.details["missing_columns"] == ["State"]
    assert results.score == 0.0


def test_the_items_now_is_pinned_else_the_scores_creation(ctx) -> None:
    query = f"{S} | where StartTime > ago(1d) | project StartTime, State"
    pinned = RESULTS(item(query, query), ctx)
    assert pinned.details["expected_rows"] == 4
    unpinned = RESULTS(KqlItem(prompt="p", generated_kql=query, expected_kql=query, dataset="h"), ctx)
    assert unpinned.details["expected_rows"] == 0 and unpinned.details["now"] == ctx.now.isoformat()


def test_a_generated_query_that_does_not_parse_did_not_execute(ctx) -> None:
    it = item(f"{S} | where State == 'TEXAS' | summarize count() by", f"{S} | summarize count() by State")
    schema, results = both(it, ctx)
    for result in (schema, results):
        assert result.status == "ok" and result.score == 0.0
        assert result.details["reason"] == "generated query did not execute"
        assert result.details["error"].startswith("could not parse KQL")
    blockers = KIND.pass_blockers(it)
    assert len(blockers) == 1 and blockers[0].startswith("generated query did not execute: could not parse KQL")


def test_a_generated_query_naming_an_unknown_column_did_not_execute(ctx) -> None:
    it = item(f"{S} | where Country == 'US' | count", f"{S} | count")
    schema, results = both(it, ctx)
    assert schema.score == 0.0 and results.score == 0.0 and "Country" in results.details["error"]
    assert "Country" in KIND.pass_blockers(it)[0]


def test_an_error_in_the_expected_query_cannot_execute_offline(ctx) -> None:
    """Never the generated query's fault: skipped with the reason, and no pass without evidence."""
    it = item(f"{S} | count", f"{S} | where Nope == 1 | count")
    schema, results = both(it, ctx)
    for result in (schema, results):
        assert result.status == "skipped" and result.reason.startswith("the expected query cannot be executed offline")
        assert "Nope" in result.reason
    assert schema.pass_blocker is None  # results match names it, once
    assert results.pass_blocker == f"no execution evidence: {results.reason}"


def test_an_expected_query_failing_in_the_binder_falls_back_to_supplied_results(ctx) -> None:
    """`has` on a boolean column fails in DuckDB's binder: cannot execute offline, and results the
    item supplies are compared instead."""
    expected = f'{S} | where InjuriesDirect > 0 | extend Hurt = true | where Hurt has "true" | count'
    generated = f"{S} | where InjuriesDirect > 0 | count"
    alone = RESULTS(item(generated, expected), ctx)
    assert alone.status == "skipped" and "Binder Error" in alone.reason
    assert alone.pass_blocker.startswith("no execution evidence: the expected query cannot be executed offline")
    supplied = item(generated, expected, expected_results=[{"Count": 20}], generated_results=[{"Count": 20}])
    result = RESULTS(supplied, ctx)
    assert (result.status, result.score, result.pass_blocker) == ("ok", 1.0, None)
    assert result.details["source"] == "supplied" and set(result.details["offline_unsupported"]) == {"expected"}


@pytest.mark.parametrize("literal", ["datetime(2007-01-30 10:00 PM)", "datetime(2007-01-30Z)"])
def test_a_datetime_literal_read_as_null_cannot_execute_offline(ctx, literal: str) -> None:
    """duckdb-kql reads these as null, silently: both sides would return nothing and agree."""
    expected = f"{S} | where StartTime > {literal} | project StartTime, State"
    for it in (item(expected, expected), item(f"{S} | where StartTime > datetime(2007-01-30 22:00) | project StartTime, State", expected)):
        result = RESULTS(it, ctx)
        assert result.status == "skipped"
        assert f"reads the datetime literal {literal} as null" in result.reason
        assert result.pass_blocker is not None
    generated_side = RESULTS(item(expected, f"{S} | project StartTime, State"), ctx)
    assert generated_side.status == "skipped" and "the generated query cannot be executed offline" in generated_side.reason


def test_an_engine_gap_in_the_generated_query_is_skipped_not_penalised(ctx) -> None:
    it = item(f"{S} | evaluate autocluster()", f"{S} | summarize count() by State")
    schema, results = both(it, ctx)
    for result in (schema, results):
        assert result.status == "skipped"
        assert "the generated query cannot be executed offline" in result.reason and "EvaluateOperator" in result.reason
        assert "supplies no" in result.reason
        assert set(result.details["offline_unsupported"]) == {"generated"}
    assert KIND.pass_blockers(it) == []


def test_an_engine_gap_in_the_expected_query_is_skipped_too(ctx) -> None:
    it = item(f"{S} | summarize count() by State", f"{S} | evaluate autocluster()")
    schema, results = both(it, ctx)
    assert schema.status == results.status == "skipped"
    assert "the expected query cannot be executed offline" in results.reason


def test_an_engine_gap_falls_back_to_results_the_item_supplies(ctx) -> None:
    supplied = [{"State": "TEXAS", "count_": 16}, {"State": "IOWA", "count_": 12}]
    it = item(
        f"{S} | summarize percentiles(DamageProperty, 50) by State",
        f"{S} | summarize count() by State",
        generated_results=supplied,
        expected_results=supplied[:1],
    )
    schema, results = both(it, ctx)
    assert schema.status == results.status == "ok"
    assert schema.score == 1.0 and results.score == 1.0
    assert results.details["source"] == "supplied" and "generated" in results.details["offline_unsupported"]
    assert results.details["compared_rows"] == 1  # the supplied rows, not the offline ones (4 states)


def test_offline_results_win_over_supplied_ones_when_both_queries_run(ctx) -> None:
    it = item(
        f"{S} | summarize count() by State",
        f"{S} | summarize count() by State",
        generated_results=[{"State": "nowhere", "count_": 1}],
        expected_results=[{"State": "TEXAS", "count_": 16}],
    )
    result = RESULTS(it, ctx)
    assert result.score == 1.0 and result.details["source"] == "offline" and result.details["compared_rows"] == 4


def test_an_error_the_item_reports_is_taken_as_given(ctx) -> None:
    it = item(f"{S} | count", f"{S} | count", generated_error="Semantic error: 'Foo' is not a column")
    schema, results = both(it, ctx)
    assert schema.score == results.score == 0.0
    assert results.details["error"] == "Semantic error: 'Foo' is not a column"
    assert offline.stats()["executions"] == 0
    assert KIND.pass_blockers(it) == ["generated query did not execute: Semantic error: 'Foo' is not a column"]


def test_components_and_items_share_executions(ctx) -> None:
    expected = f"{S} | summarize count() by State"
    items = [item(f"{S} | summarize count() by {column}", expected) for column in ("State", "Source", "EventType")]
    for it in items:
        SCHEMA(it, ctx)
        RESULTS(it, ctx)
        RESULTS_F1(it, ctx)
        assert KIND.pass_blockers(it) == []
    stats = offline.stats()
    # Three distinct queries (the first generation is the expected query itself), each run once.
    assert stats["executions"] == 3 and stats["datasets_loaded"] == 1 and stats["binds"] == 0


def test_the_pass_rule_in_a_process_that_ran_nothing_binds_the_query(storm_tables, monkeypatch) -> None:
    calls = []

    def store_loader(content_hash: str) -> dict[str, Any]:
        calls.append(content_hash)
        return storm_tables

    monkeypatch.setattr(offline, "store_loader", store_loader)
    assert KIND.pass_blockers(item(f"{S} | where Nope == 1", f"{S} | count"))[0].startswith(
        "generated query did not execute: Binder Error"
    )
    assert KIND.pass_blockers(item(f"{S} | count", f"{S} | count")) == []
    assert KIND.pass_blockers(item(f"{S} | evaluate autocluster()", f"{S} | count")) == []
    assert calls == ["h"] and offline.stats()["executions"] == 0 and offline.stats()["binds"] == 3


def test_the_pass_rule_blocks_when_it_cannot_check(monkeypatch) -> None:
    def broken(content_hash: str) -> dict[str, Any]:
        raise RuntimeError("database is down")

    monkeypatch.setattr(offline, "store_loader", broken)
    [blocker] = KIND.pass_blockers(item(f"{S} | count", f"{S} | count"))
    assert "could not check" in blocker and "database is down" in blocker
    assert KIND.pass_blockers(KqlItem(prompt="p", generated_kql="T", expected_kql="T")) == []


def test_item_fields() -> None:
    it = KqlItem.model_validate_json(
        json.dumps({"prompt": "p", "generated_kql": "T", "expected_kql": "T", "dataset": "storm", "now": "2007-12-31T00:00:00Z"})
    )
    assert it.dataset == "storm" and it.now == datetime(2007, 12, 31, tzinfo=timezone.utc)
    assert it.model_dump(mode="json", exclude_none=True)["now"] == "2007-12-31T00:00:00Z"
    with pytest.raises(ValidationError):
        KqlItem(prompt="p", generated_kql="T", expected_kql="T", dataset="")
    with pytest.raises(ValidationError):
        KqlItem(prompt="p", generated_kql="T", expected_kql="T", now="yesterday")


# --- the shipped sample dataset and example items ------------------------------------------------


def test_the_committed_sample_dataset_is_what_the_generator_writes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_storm", REPO / "examples" / "datasets" / "make_storm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = module.build()
    assert set(built) == {p.name for p in STORM_DIR.iterdir()}
    for name, data in built.items():
        assert (STORM_DIR / name).read_bytes() == data, name
    assert module.main(["--check"]) == 0
    storms = built["StormEvents.csv"].decode().splitlines()
    assert 200 <= len(storms) - 1 <= 1000


@pytest.fixture
def storm_ctx() -> MetricContext:
    tables = {p.stem: make_table(p.stem, "csv", p.read_bytes()) for p in STORM_DIR.glob("*.csv")}
    return MetricContext(now=datetime(2030, 1, 1, tzinfo=timezone.utc), dataset_loader=lambda _hash: tables)


def examples() -> dict[str, KqlItem]:
    items = [KqlItem.model_validate_json(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    return {it.id: it for it in items}


# id -> schema, semantic (design), results (recall), results (f1), blocked
EXPECTED_EXAMPLES = {
    "storm-perfect-match": (1.0, 1.0, 1.0, 1.0, False),
    "storm-equivalent-rewrite": (1.0, 1.0, 1.0, 1.0, False),
    "storm-in-vs-or": (1.0, 1.0, 1.0, 1.0, False),
    "storm-aggregation-alias": (1.0, 1.0, 1.0, 1.0, False),  # sum_DamageProperty is TotalDamage renamed
    "storm-dropped-filter": (1.0, 0.85, 1.0, 0.375, False),  # recall is fooled; f1 is not
    "storm-wrong-aggregation": (1.0, 0.8, 17 / 26, 17 / 26, False),
    "storm-different-take": (1.0, 1.0, 0.6, 0.75, False),
    "storm-does-not-parse": (0.0, 0.0, 0.0, 0.0, True),
    "storm-unknown-column": (0.0, 0.7, 0.0, 0.0, True),
    "storm-engine-gap": (None, 0.775, None, None, False),
    "storm-engine-gap-with-results": (1.0, 0.7, 1.0, 1.0, False),
}


def test_the_example_items_use_the_storm_dataset() -> None:
    items = examples()
    assert len(items) >= 8 and set(items) == set(EXPECTED_EXAMPLES)
    assert all(it.dataset == "storm" and it.now is not None for it in items.values())


@pytest.mark.parametrize("name", list(EXPECTED_EXAMPLES))
def test_example_items_score_as_documented(name: str, storm_ctx: MetricContext) -> None:
    it = examples()[name]
    schema, semantic, recall, f1, blocked = EXPECTED_EXAMPLES[name]
    got = [SCHEMA(it, storm_ctx), SEMANTIC(it, storm_ctx), RESULTS(it, storm_ctx), RESULTS_F1(it, storm_ctx)]
    for result, want in zip(got, (schema, semantic, recall, f1)):
        if want is None:
            assert result.status == "skipped" and "cannot be executed offline" in result.reason
        else:
            assert result.status == "ok" and result.score == pytest.approx(want), result.details
    assert bool(KIND.pass_blockers(it)) is blocked


def test_examples_strict_semantics_sees_the_dropped_filter_and_the_take(storm_ctx: MetricContext) -> None:
    items = examples()
    assert STRICT_SEMANTIC(items["storm-different-take"], storm_ctx).score < 1.0
    assert STRICT_SEMANTIC(items["storm-equivalent-rewrite"], storm_ctx).score == 1.0
