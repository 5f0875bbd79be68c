"""Juries: what a jury of three costs against one judge, embedded (``assay run``) on the in-thread fake
Anthropic API (tests/fakes/anthropic_server.py). Prints figures; asserts nothing.

The same N generated items are scored twice, each into its own scratch store: by a suite with one
pass/fail rubric judge, and by the same rubric judged by a jury of three Anthropic models (majority,
the fake scripted per model name so that opus always fails the answer while the two others give the
fake's seeded answers). Printed per suite: wall time,
judge calls, calls per item, cost per item, score rows written per item, and the jury's Krippendorff
alpha (``assay jury agreement --db``). The fake's latency (``--latency``) stands in for a provider's.

    .venv/bin/python -m bench.jury [--items 40] [--latency 0.05] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.fakes.anthropic_server import FakeAnthropic

REPO = Path(__file__).resolve().parents[1]
RUBRIC = {
    "rubric": "Is the answer to the arithmetic question correct?",
    "prompt": "Question: {{input}}\nReference: {{expected}}\nAnswer: {{output}}",
    "verdict": {"type": "pass_fail"},
    "max_tokens": 256,
}
MEMBERS = [
    {"provider": "anthropic", "model": "claude-haiku-5-5"},
    {"provider": "anthropic", "model": "claude-sonnet-5-5"},
    {"provider": "anthropic", "model": "claude-opus-5-5", "name": "opus"},
]


def suite(jury: bool) -> dict:
    judge = {**RUBRIC, "judges": MEMBERS, "aggregate": "majority"} if jury else {**RUBRIC, "model": "claude-haiku-5-5"}
    return {"name": "bench_jury" if jury else "bench_single", "kind": "generic", "threshold": 0.5,
            "components": {"correct": {"weight": 1.0, "judge": judge}}}


def run(folder: Path, items: Path, fake: FakeAnthropic, jury: bool, concurrency: int, latency: float) -> dict:
    path = folder / f"{'jury' if jury else 'single'}.yaml"
    path.write_text(yaml.safe_dump(suite(jury)))
    db = folder / f"{path.stem}.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))}
    env |= {"ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": fake.base_url, "PYTHONPATH": str(REPO)}
    fake.reset()
    fake.configure(model_answers={"claude-opus-5-5": {"passed": False}}, latency=latency)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(items), "--suite", str(path), "--db", str(db), "--no-live",
         "--concurrency", str(concurrency)],
        env=env, check=True, capture_output=True, text=True,
    )
    wall = time.monotonic() - started
    with sqlite3.connect(db) as con:
        n, cost = con.execute("SELECT count(*), sum(cost_usd) FROM scores").fetchone()
        rows = con.execute("SELECT count(*) FROM score_components").fetchone()[0]
    out: dict = {"wall_s": wall, "calls": fake.calls()["total"], "items": n, "cost": cost or 0.0, "rows": rows}
    if jury:
        report = subprocess.run(
            [sys.executable, "-m", "assay.cli", "jury", "agreement", "--suite", "bench_jury", "--db", str(db), "--json"],
            env=env, check=True, capture_output=True, text=True,
        )
        out["alpha"] = json.loads(report.stdout)["hashes"][0]["components"]["correct"]["alpha"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, FakeAnthropic() as fake:
        folder = Path(scratch)
        items = folder / "items.jsonl"
        items.write_text("".join(
            json.dumps({"id": f"q{n}", "input": f"What is {n} plus {n}?", "output": str(2 * n), "expected": str(2 * n)}) + "\n"
            for n in range(args.items)
        ))
        print(f"{args.items} items, fake latency {args.latency:g} s, concurrency {args.concurrency}, load {os.getloadavg()[0]:.1f}")
        print(f"{'suite':<8} {'wall s':>7} {'calls':>6} {'calls/item':>10} {'$/item':>10} {'rows/item':>9}  alpha")
        for jury in (False, True):
            r = run(folder, items, fake, jury, args.concurrency, args.latency)
            alpha = f"{r['alpha']:.3f}" if r.get("alpha") is not None else "-"
            print(
                f"{'jury' if jury else 'single':<8} {r['wall_s']:>7.1f} {r['calls']:>6} {r['calls'] / r['items']:>10.2f} "
                f"{r['cost'] / r['items']:>10.6f} {r['rows'] / r['items']:>9.1f}  {alpha}"
            )


if __name__ == "__main__":
    main()
