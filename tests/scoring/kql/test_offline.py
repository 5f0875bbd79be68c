"""Offline runs on a dataset: loaded once, each (query, dataset, now) executed once, now pinned."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from assay.scoring.intake.datasets import make_table
from assay.scoring.kql import offline
from assay.scoring.kql.execute import run_on
from tests.scoring.kql.conftest import NOW, storm_events


@pytest.fixture(autouse=True)
def fresh_caches():
    offline.clear()
    yield
    offline.clear()


class CountingLoader:
    def __init__(self, tables: dict[str, Any], delay: float = 0.0) -> None:
        self.tables = tables
        self.delay = delay
        self.calls: list[str] = []

    def __call__(self, content_hash: str) -> dict[str, Any]:
        self.calls.append(content_hash)
        time.sleep(self.delay)
        return self.tables


@pytest.fixture
def loader(storm_tables) -> CountingLoader:
    return CountingLoader(storm_tables)


def test_a_dataset_is_loaded_once_and_each_query_runs_once(loader) -> None:
    query = "StormEvents | summarize count() by State"
    first = offline.execute(query, "h1", NOW, loader)
    again = offline.execute(query, "h1", NOW, loader)
    other = offline.execute("StormEvents | count", "h1", NOW, loader)
    assert first.status == "ok" and first is again
    assert sorted(r["State"] for r in first.rows) == ["FLORIDA", "IOWA", "KANSAS", "TEXAS"]
    assert other.rows == ({"Count": 40},)
    assert loader.calls == ["h1"]
    assert offline.stats() == {"datasets_loaded": 1, "executions": 2, "binds": 0, "result_hits": 1}


def test_datasets_are_kept_apart(storm_tables) -> None:
    small = CountingLoader({"StormEvents": storm_events(8)})
    big = CountingLoader(storm_tables)
    assert offline.execute("StormEvents | count", "small", NOW, small).rows == ({"Count": 8},)
    assert offline.execute("StormEvents | count", "big", NOW, big).rows == ({"Count": 40},)
    assert small.calls == ["small"] and big.calls == ["big"]


def test_now_is_pinned_and_keys_the_cache_only_for_queries_that_read_the_clock(loader) -> None:
    timed = "StormEvents | where StartTime > ago(1d) | count"
    assert offline.execute(timed, "h", NOW, loader).rows == ({"Count": 4},)
    assert offline.execute(timed, "h", NOW + timedelta(days=30), loader).rows == ({"Count": 0},)
    assert offline.stats()["executions"] == 2
    untimed = "StormEvents | where State == 'IOWA' | count"
    offline.execute(untimed, "h", NOW, loader)
    offline.execute(untimed, "h", NOW + timedelta(days=30), loader)
    assert offline.stats()["executions"] == 3  # shared whatever the item's now


@pytest.mark.parametrize(
    ("query", "reads_clock"),
    [
        ("T | where t > ago(1h)", True),
        ("T | extend n = now()", True),
        ("T | where t > NOW()", True),  # function names are case-insensitive
        ("T | where msg == 'ago(1h)' // now", False),  # strings and comments do not count
        ("T | where note has 'snow'", False),
        ("T | summarize count()", False),
    ],
)
def test_uses_clock(query: str, reads_clock: bool) -> None:
    assert offline.uses_clock(query) is reads_clock


def test_concurrent_asks_run_a_query_once(storm_tables) -> None:
    slow = CountingLoader(storm_tables, delay=0.3)
    barrier = threading.Barrier(8)
    outcomes = []

    def ask() -> None:
        barrier.wait()
        outcomes.append(offline.execute("StormEvents | summarize sum(DamageProperty)", "h", NOW, slow))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 8 and all(o is outcomes[0] for o in outcomes)
    assert slow.calls == ["h"]
    assert offline.stats()["executions"] == 1


def test_errors_and_engine_gaps_are_outcomes_not_exceptions(loader) -> None:
    syntax = offline.execute("StormEvents | where", "h", NOW, loader)
    unknown = offline.execute("StormEvents | where Country == 'US'", "h", NOW, loader)
    gap = offline.execute("StormEvents | evaluate autocluster()", "h", NOW, loader)
    assert (syntax.status, unknown.status, gap.status) == ("error", "error", "unsupported")
    assert "Country" in unknown.message and "EvaluateOperator" in gap.message
    assert syntax.rows == () and syntax.columns == ()


def test_long_engine_messages_are_cut(loader) -> None:
    outcome = offline.execute("StormEvents | summarize count() by", "h", NOW, loader)
    assert outcome.status == "error" and outcome.message.startswith("could not parse KQL")
    assert len(outcome.message) == offline.MAX_MESSAGE_CHARS and outcome.message.endswith("…")


def test_a_failing_loader_propagates_and_is_not_cached(storm_tables) -> None:
    attempts = []

    def flaky(content_hash: str) -> dict[str, Any]:
        attempts.append(content_hash)
        if len(attempts) == 1:
            raise RuntimeError("store unavailable")
        return storm_tables

    with pytest.raises(RuntimeError, match="store unavailable"):
        offline.execute("StormEvents | count", "h", NOW, flaky)
    assert offline.execute("StormEvents | count", "h", NOW, flaky).rows == ({"Count": 40},)
    assert len(attempts) == 2


def test_check_reuses_a_run_verdict_else_binds_without_running(loader) -> None:
    offline.execute("StormEvents | where Country == 'US'", "h", NOW, loader)
    verdict = offline.check("StormEvents | where Country == 'US'", "h", loader)
    assert verdict.status == "error" and "Country" in verdict.message
    assert offline.stats()["binds"] == 0

    fresh = offline.check("StormEvents | where Nope > 1 | count", "h", loader)
    assert fresh.status == "error" and "Nope" in fresh.message
    fine = offline.check("StormEvents | summarize count() by State", "h", loader)
    assert fine.status == "ok" and fine.columns == ("State", "count_") and fine.rows == ()
    gap = offline.check("StormEvents | evaluate autocluster()", "h", loader)
    assert gap.status == "unsupported"
    assert offline.stats()["binds"] == 3 and offline.stats()["executions"] == 1


def test_results_are_cut_at_max_result_rows(loader, monkeypatch) -> None:
    monkeypatch.setattr(offline, "MAX_RESULT_ROWS", 5)
    outcome = offline.execute("StormEvents | sort by StartTime asc | project StartTime", "h", NOW, loader)
    assert outcome.truncated is True and len(outcome.rows) == 5
    oldest = sorted(r["StartTime"] for r in loader.tables["StormEvents"])[:5]
    assert [r["StartTime"] for r in outcome.rows] == oldest  # the cut keeps the sort order
    exact = offline.execute("StormEvents | take 5", "h", NOW, loader)
    assert exact.truncated is False and len(exact.rows) == 5


def test_tables_from_registered_files_keep_their_types() -> None:
    csv = b"StartTime,State,Damage\n2007-01-30 12:00:00,TEXAS,10\n2007-01-01 00:00:00,IOWA,99\n"
    table = make_table("StormEvents", "csv", csv)
    outcome = offline.execute(
        "StormEvents | where StartTime > ago(7d) | project State, Damage", "h", NOW, lambda _: {"StormEvents": table}
    )
    assert outcome.rows == ({"State": "TEXAS", "Damage": 10},)


def test_queries_cannot_reach_files(loader, tmp_path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    offline.execute("StormEvents | count", "h", NOW, loader)  # loads the database
    con = offline._engine.database("h", loader)
    with pytest.raises(Exception, match="disabled"):
        con.cursor().execute(f"SELECT * FROM read_csv_auto('{secret}')").fetchall()


def test_run_on_binds_without_running() -> None:
    import duckdb_kql

    con = duckdb_kql.connect(":memory:")
    con.execute("CREATE TABLE T AS SELECT range AS x FROM range(3)")
    assert run_on(con, "T | where x > 0", datetime(2020, 1, 1), fetch=False) == (["x"], [], False)
    assert run_on(con, "T | where x > 0", datetime(2020, 1, 1), max_rows=1) == (["x"], [{"x": 1}], True)
