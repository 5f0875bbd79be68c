"""``assay pairwise --db`` (embedded) as a user runs it: four systems scored with ``assay run`` into one
SQLite store, then compared with the fake judge preferring the longer output; the leaderboard ranks
them in their designed order. Also the worked example of docs/pairwise.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml

from tests.cli.test_run_embedded import embedded_env

SUITE = {
    "name": "pairwise_demo",
    "kind": "generic",
    "threshold": 0.5,
    "components": {"exact": {"weight": 1.0, "metric": "exact_match", "version": 1}},
    "pairwise": {"rubric": "Which answer explains more?", "max_tokens": 256},
}
LABELS = ["one", "two", "three", "four"]


def test_embedded_pairwise_ranks_four_systems_in_their_designed_order(tmp_path, fake_judge):
    suite = tmp_path / "pairwise_demo.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    db = tmp_path / "e.db"
    env = embedded_env(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake_judge.base_url)
    batch_ids = []
    for k in range(4):
        items = tmp_path / f"system{k}.jsonl"
        items.write_text(
            "".join(
                json.dumps({"id": f"q{n}", "input": f"question {n}", "output": " ".join([f"Sentence about {n}."] * (k + 1)), "expected": "x"})
                + "\n"
                for n in range(5)
            )
        )
        done = subprocess.run(
            [sys.executable, "-m", "assay.cli", "run", str(items), "--suite", str(suite), "--db", str(db), "--no-live"],
            env=env, capture_output=True, text=True, timeout=180,
        )
        assert done.returncode == 0, done.stderr + done.stdout
        batch_ids.append(re.search(r"batch\s+([0-9a-f-]{36})", done.stderr).group(1))
    fake_judge.reset()
    fake_judge.configure(pairwise_preference="longer")

    labels = [arg for name in LABELS for arg in ("--label", name)]
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", "pairwise", *batch_ids, "--suite", "pairwise_demo", *labels, "--db", str(db)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    # The plan and the progress on stderr; the report on stdout.
    assert "30 pair(s) over 5 item(s) (all pairs)" in done.stderr
    out = done.stdout
    assert "30 pair(s) judged in both orders, 0 incomplete" in out
    assert fake_judge.calls()["total"] == 60
    board = out[out.index("leaderboard") :]
    ranked = [re.search(rf"│ {rank}\s+│ (\w+)", board).group(1) for rank in range(1, 5)]
    assert ranked == ["four", "three", "two", "one"]
