"""The daily loop without a server: after `assay run`, `status`, `results`, `labels`, `noise`,
`rescore`, `compare` and `diff` read and change the embedded store (--db) — tables and summaries on
stdout, progress on stderr — and a re-score after a suite edit really scores, through the
in-process worker pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import assay
from tests.cli.test_gate_cli import embedded_env

SUITE = """
name: parity_exact
kind: generic
threshold: {threshold}
components:
  exact:
    weight: 1.0
    metric: exact_match
    version: 1
"""
ITEMS = 12
WRONG = 4  # items t00..t03 answer wrongly


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    home = tmp_path_factory.mktemp("embedded")
    (home / "suite.yaml").write_text(SUITE.format(threshold=0.5))
    lines = [
        {"id": f"t{n:02d}", "input": f"question {n}", "output": "wrong" if n < WRONG else f"answer {n}",
         "expected": f"answer {n}", "metadata": {"product": ("billing", "shipping")[n % 2]}}
        for n in range(ITEMS)
    ]
    (home / "items.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = assay("run", "items.jsonl", "--suite", "suite.yaml", "--db", "e.db", "--no-live", env=embedded_env(), cwd=home, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads((home / "items.jsonl.results.jsonl").read_text().splitlines()[0])
    return home, first["batch_id"], first


def cli(home: Path, *args: str, timeout: float = 120):  # type: ignore[no-untyped-def]
    return assay(*args, "--db", "e.db", env=embedded_env(), cwd=home, timeout=timeout)


def test_status_prints_its_summary_on_stdout_only(scored):
    home, batch, _ = scored
    shown = cli(home, "status", batch, "--by", "metadata.product")
    assert shown.returncode == 0 and shown.stderr == ""
    assert "pass rate" in shown.stdout and "66.7%" in shown.stdout and "billing" in shown.stdout
    as_json = json.loads(cli(home, "status", batch, "--json").stdout)
    assert as_json["batch_id"] == batch and as_json["progress"]["passed"] == ITEMS - WRONG


def test_results_exports_every_format_from_the_store(scored):
    home, batch, _ = scored
    lines = cli(home, "results", batch, "--status", "failed").stdout.splitlines()
    assert len(lines) == WRONG and all(json.loads(line)["item"]["output"] == "wrong" for line in lines)
    csv_text = cli(home, "results", batch, "--format", "csv").stdout
    assert csv_text.splitlines()[0].startswith("position,") and "metadata.product" in csv_text.splitlines()[0]
    assert len(csv_text.splitlines()) == ITEMS + 1
    done = cli(home, "results", batch, "--format", "xlsx", "-o", "r.xlsx")
    assert done.returncode == 0, done.stderr
    from openpyxl import load_workbook

    assert len(list(load_workbook(home / "r.xlsx", read_only=True)["Results"].iter_rows())) == ITEMS + 1


def test_usage_errors_name_what_to_fix(scored, tmp_path):
    home, batch, _ = scored
    missing = cli(home, "results", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 2 and "no batch 00000000" in missing.stderr
    not_an_id = cli(home, "status", "nope")
    assert not_an_id.returncode == 2 and "not a batch id" in not_an_id.stderr
    bad_status = cli(home, "results", batch, "--status", "green")
    assert bad_status.returncode == 2 and "--status is one of" in bad_status.stderr
    no_store = assay("status", batch, env=embedded_env(), cwd=tmp_path)
    assert no_store.returncode == 2 and "--db" in no_store.stderr and "--api-url" in no_store.stderr
    assert not (tmp_path / ".assay").exists()  # reading creates no store


def test_labels_and_noise_on_the_embedded_store(scored):
    home, _, first = scored
    (home / "labels.csv").write_text(f"item_id,passed\n{first['item_id']},true\n")
    pushed = cli(home, "labels", "push", "labels.csv", "--suite", "parity_exact")
    assert pushed.returncode == 0, pushed.stderr
    assert "suite parity_exact: 1 label(s) stored (1 new, 0 imported, 0 replaced)" in pushed.stdout
    again = json.loads(cli(home, "labels", "push", "labels.csv", "--suite", "parity_exact", "--json").stdout)
    assert again["replaced"] == 1
    shown = cli(home, "labels", "agreement", "--suite", "parity_exact")
    assert shown.returncode == 0 and "1 label(s) on 1 item(s)" in shown.stdout
    assert "disagrees: t00  machine fail (0.000), people pass (1-0)" in shown.stdout
    noise = cli(home, "noise", "--suite", "parity_exact")
    assert noise.returncode == 0 and "no noise floor measured for suite 'parity_exact'" in noise.stdout
    unknown = cli(home, "noise", "--suite", "nope")
    assert unknown.returncode == 2 and "no suite named 'nope'" in unknown.stderr


def test_rescore_after_a_suite_edit_scores_then_compare_and_diff_show_it(scored):
    home, batch, first = scored
    (home / "suite.yaml").write_text(SUITE.format(threshold=0.6))
    dry = cli(home, "rescore", "--suite", "suite.yaml", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    estimate = json.loads(dry.stdout)
    assert estimate["batch_id"] is None and estimate["estimate"]["items"] == ITEMS
    assert "dry run: nothing was created" in dry.stderr
    run = cli(home, "rescore", "--suite", "suite.yaml", "--budget", "0.5", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rescored = run.stdout.splitlines()[0]
    assert rescored != batch and "scoring" in run.stderr and "pass rate" in run.stdout
    view = json.loads(cli(home, "status", rescored, "--json").stdout)
    assert view["status"] == "completed" and view["progress"]["completed"] == ITEMS and view["budget_usd"] == 0.5
    assert view["criteria_hash"] != first["criteria_hash"]
    nothing = cli(home, "rescore", "--suite", "parity_exact")
    assert nothing.returncode == 0 and "nothing to re-score" in nothing.stderr
    compared = cli(home, "compare", batch, rescored, "--json")
    assert compared.returncode == 0, compared.stderr
    report = json.loads(compared.stdout)
    assert report["paired"] == ITEMS and report["warnings"]  # different criteria, said so
    diff = cli(home, "diff", "--suite", "parity_exact", "--from", first["criteria_hash"], "--to", view["criteria_hash"])
    assert diff.returncode == 0, diff.stderr
    assert any(" ".join(line.replace("│", " ").split()) == f"items compared {ITEMS}" for line in diff.stdout.splitlines())
