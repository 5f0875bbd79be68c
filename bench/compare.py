"""``assay compare`` at scale: the paired comparison of two batches of N items each.

For each N, a scratch database gets N items (external ids ``item-0000001`` …) scored twice: batch A and
batch B, one machine score per item and batch, two score components per score (``correctness`` and
``style``, both in the shared criteria). B's totals are A's plus noise; about 1 % of B's scores failed.
Rows are written with COPY and left unanalysed (as right after a batch lands). Then, in a fresh child
process (so its peak RSS is its own), ``compare_batches`` (the JSON report) and ``iter_pairs`` through
the CSV writer (the ``format=csv`` export, every pair) run once each. Printed per N: load seconds,
compare seconds (and the part of it spent in ``stats.paired_bootstrap``: total, pass rate and each
component), CSV seconds and rows, and the child's peak RSS. The database's own memory is not in it.

    .venv/bin/python -m bench.compare --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import harness

COMPONENTS = ("correctness", "style")
CRITERIA = "bench-compare-" + "0" * 50


def _load(url: str, n: int) -> tuple[str, str]:
    """N items, two batches scoring each once, two components per score. Returns the batch ids."""
    rng = random.Random(7)
    now = datetime.now(UTC)
    a, b = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute(
            "INSERT INTO scoring_criteria_definitions (criteria_hash, criteria_content, created_at) VALUES (%s, %s, %s)",
            (CRITERIA, json.dumps({"components": {c: {"weight": 0.5} for c in COMPONENTS}}), now),
        )
        for batch_id in (a, b):
            conn.execute(
                "INSERT INTO batches (id, suite_name, criteria_hash, status, created_by, total_items, planned_position,"
                " created_at, finished_at) VALUES (%s, 'bench', %s, 'completed', 'bench', %s, %s, %s, %s)",
                (batch_id, CRITERIA, n, n, now, now),
            )
        items = [uuid.uuid4() for _ in range(n)]
        with conn.cursor() as cur, cur.copy(
            "COPY items (id, kind, external_id, payload, content_hash, created_at) FROM STDIN"
        ) as copy:
            for i, item_id in enumerate(items):
                copy.write_row((item_id, "generic", f"item-{i:07d}", "{}", f"{i:064x}", now))
        score_rows, component_rows = [], []
        for batch_id, shift in ((a, 0.0), (b, 0.02)):
            for position, item_id in enumerate(items):
                score_id = uuid.uuid4()
                failed = batch_id == b and rng.random() < 0.01
                parts = [min(1.0, max(0.0, rng.random() * 0.6 + 0.3 + shift + rng.gauss(0, 0.05))) for _ in COMPONENTS]
                total = None if failed else sum(parts) / len(parts)
                score_rows.append((
                    score_id, item_id, batch_id, position, "bench", CRITERIA, "failed" if failed else "completed",
                    total, None if failed else total >= 0.5, False, len(COMPONENTS), len(COMPONENTS), 0.0, "bench", now, now,
                ))
                if not failed:
                    for name, part in zip(COMPONENTS, parts, strict=True):
                        component_rows.append((score_id, name, "judge", "ok", part, 0.5, part * 0.5, 1, 0.0))
        with conn.cursor() as cur, cur.copy(
            "COPY scores (id, item_id, batch_id, position, suite_name, criteria_hash, status, total, passed, partial,"
            " components_total, components_landed, cost_usd, triggered_by, created_at, completed_at) FROM STDIN"
        ) as copy:
            for row in score_rows:
                copy.write_row(row)
        with conn.cursor() as cur, cur.copy(
            "COPY score_components (score_id, component, queue, status, score, weight, weighted_score, attempts,"
            " cost_usd) FROM STDIN"
        ) as copy:
            for row in component_rows:
                copy.write_row(row)
    return str(a), str(b)


def _child(a: str, b: str) -> None:
    """Run in a fresh process: compare_batches, then the CSV export; print one JSON line."""
    from assay.scoring.reports.csv_writer import csv_chunks
    from assay.scoring.store.db import new_session, transaction
    from assay.scoring.trust import compare

    batch_a, batch_b = uuid.UUID(a), uuid.UUID(b)
    bootstrap = compare.stats.paired_bootstrap
    spent = [0.0]

    def timed_bootstrap(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return bootstrap(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    compare.stats.paired_bootstrap = timed_bootstrap  # type: ignore[assignment]
    started = time.perf_counter()
    with transaction() as session:
        report = compare.compare_batches(session, batch_a, batch_b)
    compare_s = time.perf_counter() - started
    started = time.perf_counter()
    session = new_session()
    size = rows = 0
    try:
        floor = report.item_noise_floor
        for chunk in csv_chunks(compare.iter_pairs(session, batch_a, batch_b, item_floor=floor), compare.CSV_COLUMNS, rows_per_chunk=1000):
            size += len(chunk)
            rows += chunk.count("\n") if isinstance(chunk, str) else chunk.count(b"\n")
    finally:
        session.close()
    csv_s = time.perf_counter() - started
    print(json.dumps({
        "compare_s": compare_s, "bootstrap_s": spent[0], "csv_s": csv_s, "csv_rows": rows - 1, "csv_mb": size / 2**20,
        "paired": report.paired, "excluded": report.excluded, "rss_mb": harness.peak_rss_mb(os.getpid()),
        "mean_diff": report.total.difference.mean,
    }))


def run(n: int) -> dict[str, float]:
    with harness.scratch_environment() as env:
        started = time.perf_counter()
        a, b = _load(env["ASSAY_DATABASE_URL"], n)
        load_s = time.perf_counter() - started
        out = subprocess.run(
            [sys.executable, "-m", "bench.compare", "--child", a, b],
            env=env, cwd=Path(__file__).resolve().parent.parent, check=True, capture_output=True, text=True,
        ).stdout
        return {"n": n, "load_s": load_s, **json.loads(out.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--child", nargs=2, metavar=("A", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    print(f"{'pairs':>9} {'load s':>7} {'compare s':>10} {'of it bootstrap s':>18} {'csv s':>7} {'csv rows':>9} {'csv MiB':>8} {'peak RSS MiB':>13}")
    for n in args.sizes:
        r = run(n)
        print(
            f"{r['n']:>9,} {r['load_s']:>7.1f} {r['compare_s']:>10.2f} {r.get('bootstrap_s', float('nan')):>18.2f} {r['csv_s']:>7.2f} {r['csv_rows']:>9,}"
            f" {r['csv_mb']:>8.1f} {r['rss_mb']:>13.0f}",
            flush=True,
        )
    print("(paired = matched minus ~1 % failed on B; peak RSS: the Python process running the compare)")


if __name__ == "__main__":
    main()
