"""``assay calibrate`` and ``assay noise`` as a user runs them: subprocesses against a live API, a live
worker and the loopback fake judge."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import api_server, assay  # noqa: F401  (a fixture)
from tests.conftest import API_KEY, worker_env
from tests.dashboard.support import api_process
from tests.scoring.test_pipeline import make_batch
from tests.scoring.test_rescore import complete_all
from tests.workers.test_rescore_e2e import judge_env


@pytest.fixture
def env(api_server):  # noqa: F811
    return worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})


def test_dry_run_bounds_and_refusals(env):
    result = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "1", env=env)
    assert result.returncode == 2 and "repeats" in result.stderr
    result = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "2", env=env)
    assert result.returncode == 2 and "422" in result.stderr and "no stored items" in result.stderr
    make_batch_id, _ = make_batch(3)
    complete_all(make_batch_id)
    dry = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "3", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "2 item(s) × 3" in dry.stderr and "6 judge call(s)" in dry.stderr and "dry run" in dry.stderr
    result = assay("noise", "--suite", "kql", env=env)
    assert result.returncode == 0 and "no noise floor measured" in result.stdout
    # --json: the documents alone on stdout, the estimate's lines on stderr.
    noise = json.loads(assay("noise", "--suite", "kql", "--json", env=env).stdout)
    assert noise["noise"] == [] and noise["suite"] == "kql"
    dry_json = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "3", "--dry-run", "--json", env=env)
    assert dry_json.returncode == 0 and json.loads(dry_json.stdout)["estimate"]["judge_calls"] == 6


def test_a_calibration_over_the_cap_needs_a_budget(clean_db):
    batch_id, _ = make_batch(2)
    complete_all(batch_id)
    with api_process(worker_env({"ASSAY_CALIBRATION_MAX_USD": "0.01"})) as api_url:
        env = worker_env({"ASSAY_API_URL": api_url, "ASSAY_API_KEY": API_KEY})
        refused = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "20", env=env)
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2 and "error 422" in said, refused.stderr  # a refused request is a usage error
        assert "over the $0.01 a calibration may spend without a budget of its own (ASSAY_CALIBRATION_MAX_USD)" in said
        assert "assay calibrate --budget" in said
        ran = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "20", "--budget", "1", env=env)
        assert ran.returncode == 0, ran.stderr
        assert "calibration run" in ran.stderr and ran.stdout.strip()


def test_calibrate_wait_prints_the_noise_and_noise_shows_it(env, live_worker_factory, fake_judge):
    batch_id, _ = make_batch(2)
    complete_all(batch_id)
    fake_judge.configure(repeat_spread=0.2)
    live_worker_factory(judge_env(fake_judge))
    run = assay("calibrate", "--suite", "kql", "--sample", "2", "--repeats", "2", "--wait", env=env, timeout=180)
    assert run.returncode == 0, run.stderr
    run_id = run.stdout.strip().splitlines()[0]
    assert "judge noise" in run.stdout and "llm_grading" in run.stdout and "total" in run.stdout
    assert "2 repeats per item" in run.stdout
    assert fake_judge.calls()["total"] == 4
    shown = assay("noise", "--suite", "kql", env=env)
    assert shown.returncode == 0 and run_id[:8] in shown.stdout and "(current)" in shown.stdout
