"""Sandbox per-run overhead: what one confined run costs on top of the code itself. Prints figures;
asserts nothing. Target: ≤ 30 ms per run with pandas pre-imported.

Measured from the worker's side (request sent → answer decoded), after a warm-up:

1. ``result = 1``: the bare overhead (fork, confinement, JSON both ways, reaping off the path);
2. a groupby on a 1,000-row frame the executor holds (its frames are inherited copy-on-write);
3. the same with ``repeat=3`` (the best-of-3 timing the performance metric uses), per run;
4. the executor's start-up (clean process, pandas import, layer probe).

    .venv/bin/python -m bench.sandbox [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from assay.scoring.intake.datasets import Table
from assay.scoring.sandbox import DatasetRef, SandboxClient


def _csv(rows: int) -> bytes:
    lines = ["id,dept,salary"] + [f"{i},d{i % 7},{1000 + (i * 37) % 5000}" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def _measure(client: SandboxClient, code: str, runs: int, **kwargs: object) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        outcome = client.run(code, **kwargs)  # type: ignore[arg-type]
        times.append((time.perf_counter() - started) * 1000)
        if not outcome.ok:
            raise SystemExit(f"run failed: {outcome.error}")
    return times


def _line(label: str, times: list[float], per: int = 1) -> str:
    per_run = [t / per for t in times]
    ordered = sorted(per_run)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"{label:<44} median {statistics.median(per_run):6.1f} ms   p90 {p90:6.1f} ms   min {ordered[0]:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    started = time.perf_counter()
    client = SandboxClient()
    hello = client.hello()
    startup = (time.perf_counter() - started) * 1000
    layers = ", ".join(k for k, v in hello["layers"].items() if v and k != "probe_errors")
    print(f"executor pid {hello['pid']} · pandas {hello['pandas']} · python {hello['python']}")
    print(f"layers active: {layers}")
    if hello["missing"]:
        print(f"layers MISSING (runs refused): {', '.join(hello['missing'])}")
        return
    dataset = DatasetRef("bench:employees", [Table("employees", "csv", _csv(1000))])
    client.load(dataset)
    try:
        _measure(client, "result = 1", 10)
        bare = _measure(client, "result = 1", args.runs)
        group = _measure(client, "result = df.groupby('dept')['salary'].mean()", max(20, args.runs // 4), dataset=dataset)
        best_of_3 = _measure(client, "result = df.groupby('dept')['salary'].mean()", max(10, args.runs // 10), dataset=dataset, repeat=3)
        print(_line("bare run (result = 1)", bare))
        print(_line("groupby on 1,000 rows, one run", group))
        print(_line("groupby on 1,000 rows, best of 3, per run", best_of_3, per=3))
        print(f"{'executor start-up (pandas import, probe)':<44} {startup:6.0f} ms")
        target = statistics.median(bare)
        print(f"per-run overhead: {target:.1f} ms (target ≤ 30 ms) — {'OK' if target <= 30 else 'OVER'}")
    finally:
        client.close()


if __name__ == "__main__":
    main()
