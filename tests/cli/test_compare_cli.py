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
    lines = _lines(result.stderr)
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
    lines = _lines(result.stderr)
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
    assert result.returncode == 1 and "404" in result.stderr and missing in result.stderr
