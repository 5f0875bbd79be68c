"""execute_kql: duckdb-kql on inline tables, a pinned clock, and the two kinds of failure."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta, timezone
from typing import Any

import pytest

from assay.scoring.kql.execute import KqlExecutionError, KqlUnsupported, OfflineTables, execute_kql
from tests.scoring.kql.conftest import NOW, storm_events

Tables = dict[str, list[dict[str, Any]]]


def test_summarize_matches_a_count_done_by_hand(storm_tables: Tables) -> None:
    columns, rows = execute_kql(
        "StormEvents | where StartTime > ago(2d) | summarize count() by State | order by State asc", storm_tables, NOW
    )
    recent = Counter(r["State"] for r in storm_tables["StormEvents"] if r["StartTime"] > NOW - timedelta(days=2))
    assert columns == ["State", "count_"]
    assert rows == [{"State": s, "count_": n} for s, n in sorted(recent.items())]


def test_now_is_pinned_not_the_wall_clock(storm_tables: Tables) -> None:
    query = "StormEvents | where StartTime > ago(1d) | count"
    assert execute_kql(query, storm_tables, NOW)[1] == [{"Count": 4}]  # storms at 1, 7, 13 and 19 hours ago
    assert execute_kql(query, storm_tables, NOW + timedelta(days=30))[1] == [{"Count": 0}]
    assert execute_kql(query, storm_tables, NOW - timedelta(days=30))[1] == [{"Count": 40}]
    # An aware "now" is the same instant in UTC.
    aware = (NOW + timedelta(hours=2)).replace(tzinfo=timezone(timedelta(hours=2)))
    assert execute_kql(query, storm_tables, aware)[1] == [{"Count": 4}]


def test_count_star_runs(storm_tables: Tables) -> None:
    assert execute_kql("StormEvents | summarize count(*)", storm_tables, NOW) == (["count_"], [{"count_": 40}])


def test_joins_and_dynamic_values(storm_tables: Tables) -> None:
    tables = {**storm_tables, "Details": [{"State": "TEXAS", "Info": {"capital": "Austin", "codes": [1, 2]}}]}
    columns, rows = execute_kql(
        "StormEvents | join kind=inner (Details) on State | summarize by State, Info", tables, NOW
    )
    assert rows == [{"State": "TEXAS", "Info": {"capital": "Austin", "codes": [1, 2]}}]


def test_whole_and_real_numbers_share_a_column() -> None:
    columns, rows = execute_kql("T | summarize sum(x)", {"T": [{"x": 1}, {"x": 2.5}, {"x": None}]}, NOW)
    assert rows == [{"sum_x": 3.5}]


@pytest.mark.parametrize(
    "query",
    ["StormEvents | where", "StormEvents | where NoSuchColumn == 1", "NoSuchTable | take 1"],
)
def test_a_wrong_query_is_an_execution_error(storm_tables: Tables, query: str) -> None:
    with pytest.raises(KqlExecutionError):
        execute_kql(query, storm_tables, NOW)


def test_an_engine_gap_is_unsupported_not_an_error(storm_tables: Tables) -> None:
    with pytest.raises(KqlUnsupported, match="EvaluateOperator"):
        execute_kql("StormEvents | evaluate autocluster()", storm_tables, NOW)


def test_writes_are_refused(storm_tables: Tables) -> None:
    with pytest.raises(KqlUnsupported, match="writes are disabled"):
        execute_kql(".set-or-replace Copy <| StormEvents", storm_tables, NOW)


def test_one_load_serves_several_queries() -> None:
    with OfflineTables({"StormEvents": storm_events(8)}) as database:
        assert database.run("StormEvents | count", NOW)[1] == [{"Count": 8}]
        assert database.run("StormEvents | where State == 'IOWA' | count", NOW)[1] == [{"Count": 3}]


def test_tables_that_cannot_be_typed_are_refused() -> None:
    with pytest.raises(ValueError, match="mixes value types"):
        execute_kql("T", {"T": [{"x": 1}, {"x": "one"}]}, NOW)
    with pytest.raises(ValueError, match="has no rows"):
        execute_kql("T", {"T": []}, NOW)
    with pytest.raises(ValueError, match="cannot load a value of type"):
        execute_kql("T", {"T": [{"x": object()}]}, NOW)
