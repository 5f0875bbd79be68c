"""The CI gate as a user runs it, embedded: `assay run --baseline/--fail-under/--junit/--json` and
`assay gate` over results files and the embedded store's batches; the exit codes of each outcome; the
results file carrying each item's content; tables on stdout, progress on stderr."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.cli.test_cli import assay
from tests.conftest import REPO

SUITE = """
name: gate_exact
kind: generic
threshold: 0.5
components:
  exact:
    weight: 1.0
    metric: exact_match
    version: 1
"""
PRODUCTS = ("billing", "shipping", '=HYPERLINK("http://x")')
REGRESSED = 12  # items 0..11 answer wrongly in the candidate


def items(path: Path, *, wrong: int) -> Path:
    lines = []
    for n in range(30):
        output = "wrong" if n < wrong else f"answer {n}"
        lines.append({"id": f"t{n:02d}", "input": f"question {n}", "output": output, "expected": f"answer {n}",
                      "metadata": {"product": PRODUCTS[n % 3]}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def embedded_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))}
    return env | {"PYTHONPATH": str(REPO), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A baseline run where every item passes, and a candidate where 12 of 30 regress, gated by
    `assay run --baseline` itself."""
    home = tmp_path_factory.mktemp("gate")
    (home / "suite.yaml").write_text(SUITE)
    items(home / "base.jsonl", wrong=0)
    items(home / "cand.jsonl", wrong=REGRESSED)
    env = embedded_env()
    base = assay("run", "base.jsonl", "--suite", "suite.yaml", "--db", "e.db", "--no-live", env=env, cwd=home, timeout=300)
    assert base.returncode == 0, base.stderr[-3000:]
    cand = assay(
        "run", "cand.jsonl", "--suite", "suite.yaml", "--db", "e.db", "--no-live",
        "--baseline", "base.jsonl.results.jsonl", "--by", "metadata.product", "--fail-under", "0.8",
        "--junit", "junit.xml", env=env, cwd=home, timeout=300,
    )
    return home, base, cand


def batch_of(results: Path) -> str:
    return json.loads(results.read_text().splitlines()[0])["batch_id"]


def test_run_prints_its_summary_on_stdout_and_progress_on_stderr(runs):
    _, base, _ = runs
    assert "pass rate" in base.stdout and "100.0%" in base.stdout
    assert "scoring" in base.stderr and "results written" in base.stderr
    assert "pass rate" not in base.stderr


def test_the_results_file_carries_what_the_gate_needs_and_the_item(runs):
    home, _, _ = runs
    first = json.loads((home / "base.jsonl.results.jsonl").read_text().splitlines()[0])
    for field in ("external_id", "criteria_hash", "status", "passed", "total_score", "partial"):
        assert first[field] is not None, field
    assert first["item"] == {"id": "t00", "input": "question 0", "output": "answer 0", "expected": "answer 0",
                             "metadata": {"product": "billing"}}


def test_a_regressing_run_fails_its_gate_naming_the_rules_and_the_items(runs):
    _, _, cand = runs
    assert cand.returncode == 1, cand.stderr[-3000:]
    out = cand.stdout
    assert "gate FAILED (max_drop, mcnemar)" in out
    assert "✗ mcnemar: 12 pass→fail against 0 fail→pass" in out
    assert "✗ max_drop: mean total -0.4000" in out
    assert "✗ fail_under: pass rate 60.0% (18 of 30 items) is under 80%" in out
    assert "slices by metadata.product (Holm-corrected)" in out
    assert "failing item t00: pass→fail" in out


def test_junit_lists_every_item_and_the_failing_ones_with_the_reason(runs):
    home, _, _ = runs
    root = ET.parse(home / "junit.xml").getroot()
    suite = root.find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    items_named = {f"t{n:02d}" for n in range(30)}
    assert items_named <= set(cases)
    failing = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failing == {f"t{n:02d}" for n in range(REGRESSED)} | {"mcnemar", "max_drop", "fail_under"}
    assert cases["t00"].find("failure").get("message").startswith("pass→fail: failed: total 0.000")
    assert suite.get("tests") == "33" and suite.get("failures") == "15"


def test_gate_over_results_files_and_embedded_batches(runs):
    home, _, _ = runs
    env = embedded_env()
    base, cand = home / "base.jsonl.results.jsonl", home / "cand.jsonl.results.jsonl"
    copy = home / "copy.results.jsonl"
    copy.write_text(base.read_text())
    unchanged = assay("gate", str(base), str(copy), env=env, cwd=home)
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "gate PASSED" in unchanged.stdout and "pairs 30" in unchanged.stdout

    by_batch = assay("gate", batch_of(base), batch_of(cand), "--db", "e.db", "--json", env=env, cwd=home)
    assert by_batch.returncode == 1
    report = json.loads(by_batch.stdout)  # nothing but the document on stdout
    assert [f["rule"] for f in report["failures"]] == ["mcnemar", "max_drop"]
    assert report["overall"]["pass_to_fail"] == REGRESSED and len(report["failing_items"]) == REGRESSED
    assert report["criteria_hash"] == json.loads(base.read_text().splitlines()[0])["criteria_hash"]


def test_gate_never_passes_on_nothing(runs):
    home, _, _ = runs
    env = embedded_env()
    base = home / "base.jsonl.results.jsonl"
    other = home / "other-hash.results.jsonl"
    other.write_text("".join(
        json.dumps({**json.loads(line), "criteria_hash": "f" * 64}) + "\n" for line in base.read_text().splitlines()
    ))
    hashes = assay("gate", str(base), str(other), env=env, cwd=home)
    assert hashes.returncode == 1 and "✗ criteria_hash: the sides were scored under different criteria" in hashes.stdout
    few = assay("gate", str(base), str(home / "cand.jsonl.results.jsonl"), "--min-pairs", "31", env=env, cwd=home)
    assert few.returncode == 1 and "✗ too_few_pairs: 30 pair(s) compared, fewer than the 31" in few.stdout


def test_gate_usage_errors_exit_2(runs):
    home, _, _ = runs
    env = embedded_env()
    base = home / "base.jsonl.results.jsonl"
    (home / "not-results.jsonl").write_text('{"id": "t1", "input": "q"}\n')
    cases = [
        (("gate", str(base), "not-results.jsonl"), "not-results.jsonl, line 1: not a results line"),
        (("gate", str(base), "nope"), "nope: neither a results file nor a batch id"),
        (("gate", str(base), "00000000-0000-0000-0000-000000000000", "--db", "missing.db"), "no embedded store at missing.db"),
        (("gate", str(base), "00000000-0000-0000-0000-000000000000", "--db", "e.db"), "no batch"),
        (("gate", str(base), str(base)), "the same"),
        (("gate", str(base), str(base), "--by", "product"), "metadata.KEY"),
    ]
    for args, message in cases:
        result = assay(*args, env=env, cwd=home)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr
    # A baseline that is no results file stops `run` before it scores anything.
    run = assay("run", "base.jsonl", "--suite", "suite.yaml", "--db", "e.db", "--baseline", "not-results.jsonl",
                env=env, cwd=home)
    assert run.returncode == 2 and "not a results line" in run.stderr and "results written" not in run.stderr


def test_run_fail_under_passes_and_fails_on_the_pass_rate(runs):
    home, _, _ = runs
    env = embedded_env()
    over = assay("run", "base.jsonl", "--suite", "suite.yaml", "--db", "e.db", "--no-live", "--fail-under", "0.9",
                 "--out", "again.results.jsonl", "--json", env=env, cwd=home, timeout=300)
    assert over.returncode == 0, over.stderr[-3000:]
    doc = json.loads(over.stdout)
    assert doc["passed"] is True and doc["failures"] == [] and doc["batch"]["status"] == "completed"
