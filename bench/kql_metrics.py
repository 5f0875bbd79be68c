"""KQL metrics throughput, on one core: pairs/s. Prints figures; asserts nothing.

1. Deterministic part, no execution: schema match + semantic similarity + results match on pairs
   whose both queries returned 100 rows. A batch repeats its expected queries (few distinct ones,
   many generations each), and the parse cache is cleared at the start of each batch, so each
   distinct query is parsed once per batch, as a worker does.
2. Offline execution: both queries of each pair run with duckdb-kql on a 100k-row StormEvents-like
   table (loaded once), then compared; every query distinct (no result cache hits), and again with
   the cache warm.

    .venv/bin/python -m bench.kql_metrics [--pairs 5000] [--distinct 50] [--exec-pairs 100]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from assay.scoring.intake.datasets import Table
from assay.scoring.kinds.kql import KqlItem
from assay.scoring.kql import offline
from assay.scoring.kql.parser import _parse_cached
from assay.scoring.metrics.catalog import build_metric, registered_metrics
from assay.scoring.metrics.registry import MetricContext

NOW = datetime(2007, 12, 31, tzinfo=timezone.utc)
STATES = ["TEXAS", "KANSAS", "IOWA", "OHIO", "FLORIDA", "UTAH", "MAINE", "IDAHO", "OREGON", "NEVADA"]
EVENTS = ["Hail", "Flood", "Tornado", "Heat", "Blizzard", "Drought", "Lightning", "High Wind"]


def metric(name: str, args: dict[str, object]) -> object:
    """The metric as the code registers it now (its current version)."""
    return build_metric(name, registered_metrics()[name].version, args, "kql")


def metrics(strict: bool) -> dict[str, object]:
    return {
        "schema_match": metric("kql.schema_match", {}),
        "semantic_similarity": metric("kql.semantic_similarity", {"strict": strict}),
        "results_match": metric("kql.results_match", {"mode": "f1" if strict else "recall"}),
    }


def expected_query(i: int) -> str:
    state, event = STATES[i % len(STATES)], EVENTS[i % len(EVENTS)]
    return (
        f'StormEvents | where State == "{state}" and EventType != "{event}" and StartTime > ago({i % 30 + 1}d) '
        f"| summarize Storms = count(), Damage = sum(DamageProperty) by Source, BeginLocation "
        f"| sort by Damage desc | take 100"
    )


def generated_query(i: int, variant: int) -> str:
    state, event = STATES[i % len(STATES)], EVENTS[i % len(EVENTS)]
    days = i % 30 + 1
    where = [
        f"StartTime > ago({days * 24}h) and '{state}' == State and EventType != '{event}'",  # equivalent
        f'State == "{state}" and StartTime > ago({days}d)',  # dropped filter
        f'State in ("{state}", "OHIO") and EventType != "{event}" and StartTime > ago({days}d)',  # changed filter
    ][variant % 3]
    agg = ["sum", "max", "avg"][variant % 3]
    return (
        f"StormEvents | where {where} | summarize Storms = count(), Damage = {agg}(DamageProperty) "
        f"by Source, BeginLocation | sort by Damage desc | take {100 - variant % 7}"
    )


def rows(seed: int, n: int = 100) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [
        {"Source": f"S{rng.randrange(10)}", "BeginLocation": f"L{k}", "Storms": rng.randrange(50), "Damage": rng.randrange(10**6) * 1.0}
        for k in range(n)
    ]


def bench_deterministic(pairs: int, distinct: int, batches: int, strict: bool) -> None:
    scorers = metrics(strict)
    ctx = MetricContext(now=NOW)
    items = []
    for p in range(pairs):
        i = p % distinct
        expected = rows(i)
        generated = list(expected) if p % 3 == 0 else rows(i + 10_000 * (p % 5))
        items.append(
            KqlItem(
                prompt="p",
                expected_kql=expected_query(i),
                generated_kql=generated_query(i, p // distinct),
                expected_results=expected,
                generated_results=generated,
            )
        )
    distinct_queries = len({q for it in items for q in (it.expected_kql, it.generated_kql)})
    per_metric = dict.fromkeys(scorers, 0.0)
    cpu_per_metric = dict.fromkeys(scorers, 0.0)
    start, cpu_start = time.perf_counter(), time.thread_time()
    for _ in range(batches):
        _parse_cached.cache_clear()  # a new batch: each distinct query is parsed once in it
        for item in items:
            for name, metric in scorers.items():
                t, c = time.perf_counter(), time.thread_time()
                metric(item, ctx)  # type: ignore[operator]
                per_metric[name] += time.perf_counter() - t
                cpu_per_metric[name] += time.thread_time() - c
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
    n = pairs * batches
    # CPU time beside wall time: on a loaded machine the wall time also counts waiting for a core.
    print(
        f"deterministic ({'kql_strict' if strict else 'kql'}): {n} pairs, {distinct_queries} distinct queries per batch "
        f"of {pairs}, 100-row results: {n / elapsed:,.0f} pairs/s, CPU {1e3 * cpu / n:.2f} ms/pair"
    )
    for name, seconds in per_metric.items():
        print(f"    {name:<20} {1e6 * seconds / n:8.1f} µs/pair wall {1e6 * cpu_per_metric[name] / n:8.1f} µs/pair CPU")


def storm_table(rows_n: int) -> Table:
    """A StormEvents-like CSV table of ``rows_n`` rows, generated by DuckDB (fast, deterministic)."""
    states = ", ".join(f"'{s}'" for s in STATES)
    events = ", ".join(f"'{e}'" for e in EVENTS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "StormEvents.csv"
        con = duckdb.connect()
        con.execute(
            f"""COPY (
                SELECT TIMESTAMP '2007-01-01' + to_seconds((i * 7919) % 31536000) AS StartTime,
                       ([{states}])[1 + (i * 31) % {len(STATES)}] AS State,
                       ([{events}])[1 + (i * 17) % {len(EVENTS)}] AS EventType,
                       'S' || (i % 10) AS Source,
                       'L' || (i % 500) AS BeginLocation,
                       (i * 104729) % 5000000 AS DamageProperty,
                       i % 4 AS InjuriesDirect
                FROM range({rows_n}) t(i)
            ) TO '{path}' (HEADER, DELIMITER ',')"""
        )
        con.close()
        return Table("StormEvents", "csv", path.read_bytes())


def bench_execution(pairs: int, rows_n: int) -> None:
    offline.clear()
    table = storm_table(rows_n)
    loader = lambda _hash: {"StormEvents": table}  # noqa: E731
    scorer = metric("kql.results_match", {"mode": "recall"})
    start = time.perf_counter()
    offline.execute("StormEvents | count", "bench", NOW, loader)
    print(f"offline execution: {rows_n:,}-row table ({len(table.data) / 1e6:.1f} MB CSV) loaded in {time.perf_counter() - start:.2f} s")

    items = [
        KqlItem(
            prompt="p",
            expected_kql=expected_query(p).replace("take 100", f"take {100 + p}"),
            generated_kql=generated_query(p, p),
            dataset="bench",
        )
        for p in range(pairs)
    ]
    ctx = MetricContext(now=NOW, dataset_loader=loader)
    for label in ("cold (every query runs)", "warm (result cache)"):
        before = offline.stats()["executions"]
        start = time.perf_counter()
        for item in items:
            scorer(item, ctx)
        elapsed = time.perf_counter() - start
        runs = offline.stats()["executions"] - before
        print(f"    {label:<24} {pairs / elapsed:8,.1f} pairs/s ({runs} executions, {1e3 * elapsed / pairs:.1f} ms/pair)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5000, help="pairs per batch (deterministic part)")
    parser.add_argument("--distinct", type=int, default=50, help="distinct expected queries per batch")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--exec-pairs", type=int, default=100, help="pairs executed offline")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the offline table")
    args = parser.parse_args()
    print(f"pid {os.getpid()}, one thread; duckdb {duckdb.__version__}")
    bench_deterministic(args.pairs, args.distinct, args.batches, strict=False)
    bench_deterministic(args.pairs, args.distinct, args.batches, strict=True)
    bench_execution(args.exec_pairs, args.rows)


if __name__ == "__main__":
    main()
