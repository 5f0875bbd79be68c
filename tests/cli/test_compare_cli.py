"""``assay compare`` as a user runs it: a subprocess against a live API, on the known case of
tests/scoring/test_compare.py."""

from __future__ import annotations

import csv
import uuid

import pytest

from tests.cli.test_cli import assay
from tests.conftest import API_KEY, worker_env
from tests.dashboard.support import api_process
from tests.scoring.test_compare import H, add_noise, seed


@pytest.fixture
def api_server(clean_db):
    with api_process() as url:
        yield url


def _lines(stderr: str) -> list[str]:
    return [" ".join(line.replace("│", " ").split()) for line in stderr.splitlines()]


def test_compare_prints_the_report_and_writes_every_pair(api_server, tmp_path):
    from assay.scoring.store.db import transaction

    with transaction() as session:
        a, b = seed(session)
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY, "COLUMNS": "250"})
    out = tmp_path / "pairs.csv"
    result = assay("compare", str(a), str(b), "--csv", str(out), "--limit", "1", env=env)
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout)
    for expected in [
        "scores of a 7 usable · 1 partial · 1 failed · 0 pending · 0 cancelled",
        "unmatched in b 1 only here · 0 without an external id · 2 with a repeated one",
        "pairs matched / paired / excluded 7 / 5 / 2",
        "mean total a → b 0.650 → 0.700",
        "wins / ties / losses of b 3 / 1 / 1",
        "pass rate a → b 0.600 → 0.600",
        "McNemar (pass→fail / fail→pass) 1 / 1 · p = 1",
        "b shift (n=4) +0.000",
        "no noise floor measured",
        "moved most (1 of 5)",
        "e2 1.000 0.500 -0.500 pass→fail –",
        "flipped (1 of 2)",
    ]:
        assert any(expected in line for line in lines), (expected, result.stderr)
    assert any(line.startswith("mean difference [95 % CI] +0.050 [") for line in lines), result.stderr
    rows = list(csv.DictReader(out.open(newline="")))
    assert len(rows) == 12 and rows[0]["external_id"] == "e1" and rows[0]["match"] == "paired"


def test_compare_shows_the_noise_floor_and_warnings(api_server):
    from assay.scoring.store.db import transaction

    with transaction() as session:
        a, b = seed(session, b_suite="s2")
        add_noise(session, H, {"__total__": 0.1})
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY, "COLUMNS": "250"})
    result = assay("compare", str(a), str(b), env=env)
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout + result.stderr)
    assert any("warning: the batches belong to different suites ('s1' and 's2')" in line for line in lines), result.stderr
    assert any("noise floor ±0.124: within the judge's noise" in line for line in lines), result.stderr
    assert any(line == "per-item noise floor ±0.277" for line in lines), result.stderr


def test_compare_names_a_missing_batch(api_server):
    from assay.scoring.store.db import transaction

    with transaction() as session:
        a, _ = seed(session)
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    missing = str(uuid.uuid4())
    result = assay("compare", str(a), missing, env=env)
    assert result.returncode == 2 and "404" in result.stderr and missing in result.stderr


def test_compare_fail_on_regression_gates_through_the_api(api_server, tmp_path):
    import json
    import xml.etree.ElementTree as ET

    from tests.api.test_gate_api import seed as seed_gate

    base, cand = seed_gate(["failed"] + [0.2] * 11 + [0.9] * 8)
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY, "COLUMNS": "250"})
    junit = tmp_path / "junit.xml"
    result = assay("compare", base, cand, "--fail-on-regression", "--junit", str(junit), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "gate FAILED (max_drop, mcnemar)" in result.stdout and "McNemar (pass→fail / fail→pass)" in result.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["e00"].find("failure").get("message") == "pass→fail: failed"
    assert cases["e19"].find("failure") is None and cases["mcnemar"].find("failure") is not None

    as_json = assay("compare", base, cand, "--fail-on-regression", "--json", env=env)
    assert as_json.returncode == 1
    doc = json.loads(as_json.stdout)
    assert doc["paired"] == 19 and [f["rule"] for f in doc["gate"]["failures"]] == ["mcnemar", "max_drop"]

    gate = assay("gate", base, cand, "--api-url", api_server, "--min-pairs", "25", env=env)
    assert gate.returncode == 1 and "✗ too_few_pairs: 20 pair(s) compared" in gate.stdout

    # Results files of a suite the API does not know: gated with no noise floor, not refused.
    line = {"external_id": None, "criteria_hash": H, "status": "completed", "partial": False, "passed": True,
            "total_score": 0.9, "suite": "only_on_a_laptop"}
    results = tmp_path / "laptop.results.jsonl"
    results.write_text("".join(json.dumps({**line, "external_id": f"x{n}"}) + "\n" for n in range(10)))
    same = tmp_path / "again.results.jsonl"
    same.write_text(results.read_text())
    files = assay("gate", str(results), str(same), "--api-url", api_server, env=env)
    assert files.returncode == 0 and "no noise floor measured" in files.stdout, files.stdout + files.stderr

    refused = assay("gate", base, cand, "--api-url", api_server, env=worker_env({"ASSAY_API_KEY": "wrong"}))
    assert refused.returncode == 4 and "ASSAY_API_KEY" in refused.stderr and "--api-key" in refused.stderr


def test_compare_fail_on_regression_over_an_unfinished_batch_exits_3(api_server):
    from tests.api.test_gate_api import seed as seed_gate

    base, cand = seed_gate([0.9] * 19 + ["pending"])
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    result = assay("compare", base, cand, "--fail-on-regression", env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"✗ incomplete: batch {cand} has 1 unfinished item(s)" in result.stdout
    usage = assay("compare", base, cand, "--junit", "x.xml", env=env)
    assert usage.returncode == 2 and "--fail-on-regression" in usage.stderr
