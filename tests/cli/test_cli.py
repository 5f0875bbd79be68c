"""The ``assay`` CLI as a user runs it: subprocesses against a live API, worker and Flower."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import API_KEY, REPO, wait_for, worker_env
from tests.dashboard.support import api_process, free_port

EXAMPLES = REPO / "examples" / "kql_items.jsonl"


def assay(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "assay.cli", *args],
        env=env or worker_env(),
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def api_server(clean_db):
    with api_process() as url:
        yield url


def test_help_lists_every_command():
    result = assay("--help")
    assert result.returncode == 0
    for command in ["run", "submit", "status", "results", "cancel", "api", "worker", "beat", "flower", "migrate"]:
        assert command in result.stdout


def test_run_rejects_bad_lines_with_their_numbers(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(EXAMPLES.read_text().splitlines()[0] + "\n{broken\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")} | {"PYTHONPATH": str(REPO)}
    result = assay("run", str(bad), "--suite", "kql", "--db", str(tmp_path / "x.db"), env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "line 2" in result.stderr and "nothing was written" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_unknown_suite_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")} | {"PYTHONPATH": str(REPO)}
    result = assay("run", str(EXAMPLES), "--suite", "nope", "--db", str(tmp_path / "x.db"), env=env, cwd=tmp_path)
    assert result.returncode == 2 and "no suite named 'nope'" in result.stderr
    assert "Traceback" not in result.stderr


def test_worker_refuses_unknown_queues():
    result = assay("worker", "--queues", "metrics,bogus")
    assert result.returncode == 2 and "bogus" in result.stderr


@pytest.mark.parametrize("password", [None, "", "  \t "], ids=["unset", "empty", "blank"])
def test_flower_refuses_to_start_without_a_password(password):
    """An empty or blank password is refused exactly like a missing one (it would let anyone in)."""
    env = worker_env()
    env.pop("ASSAY_FLOWER_PASSWORD", None)
    if password is not None:
        env["ASSAY_FLOWER_PASSWORD"] = password
    result = assay("flower", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "set ASSAY_FLOWER_PASSWORD (not empty or blank)" in result.stderr
    assert "the password of Flower's user 'admin' (ASSAY_FLOWER_USER)" in " ".join(result.stderr.split())


def test_a_blank_flower_password_reads_as_unset(monkeypatch):
    from assay.settings import Settings

    for blank in ("", "   "):
        monkeypatch.setenv("ASSAY_FLOWER_PASSWORD", blank)
        assert Settings().flower_password is None
    monkeypatch.setenv("ASSAY_FLOWER_PASSWORD", " s3cret ")
    assert Settings().flower_password.get_secret_value() == " s3cret "


def test_flower_starts_with_basic_auth():
    port = free_port()
    env = worker_env({"ASSAY_FLOWER_PASSWORD": "s3cret", "ASSAY_FLOWER_USER": "ops"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "flower", "--port", str(port)],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        def answers():
            try:
                return httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            except httpx.HTTPError:
                return None

        anonymous = wait_for(answers, timeout=30, message="Flower to start")
        assert anonymous.status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/", auth=("ops", "wrong"), timeout=5).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/", auth=("ops", "s3cret"), timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_submit_wait_status_results_cancel(api_server, live_worker_factory, tmp_path):
    live_worker_factory()
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    submitted = assay("submit", str(EXAMPLES), "--suite", "kql", "--wait", env=env)
    assert submitted.returncode == 0, submitted.stderr
    batch_id = submitted.stdout.strip().splitlines()[0]
    assert "4 items accepted" in submitted.stderr and "completed" in submitted.stdout
    status = assay("status", batch_id, env=env)
    # The summary is on stdout (it can be piped and kept), nothing of it on stderr.
    assert status.returncode == 0 and "completed" in status.stdout and status.stderr == ""
    out = tmp_path / "r.csv"
    results = assay("results", batch_id, "--format", "csv", "-o", str(out), env=env)
    assert results.returncode == 0, results.stderr
    assert len(out.read_text().strip().splitlines()) == 5
    workbook = tmp_path / "r.xlsx"
    xlsx = assay("results", batch_id, "--format", "xlsx", "-o", str(workbook), env=env)
    assert xlsx.returncode == 0, xlsx.stderr
    from openpyxl import load_workbook

    sheets = load_workbook(workbook, read_only=True)
    assert sheets.sheetnames == ["Summary", "Results"] and len(list(sheets["Results"].iter_rows())) == 5
    no_file = assay("results", batch_id, "--format", "xlsx", env=env)
    assert no_file.returncode == 2 and "--output" in no_file.stderr
    jsonl = assay("results", batch_id, "--status", "failed", env=env)
    assert all(json.loads(line)["passed"] is False for line in jsonl.stdout.splitlines())
    again = assay("cancel", batch_id, env=env)
    assert again.returncode == 2 and "already completed" in again.stderr


def test_client_commands_report_auth_and_network_errors(api_server, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(EXAMPLES.read_text().splitlines()[0] + "\n{broken\n")
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    refused = assay("submit", str(bad), "--suite", "kql", env=env)
    # The 422 names the CLI's own option, not the API's query parameter.
    assert refused.returncode == 2 and "line 2" in refused.stderr
    assert "--partial" in refused.stderr and "partial=true" not in refused.stderr
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": "wrong"})
    result = assay("status", "00000000-0000-0000-0000-000000000000", env=env)
    assert result.returncode == 4 and "401" in result.stderr
    assert "ASSAY_API_KEY" in result.stderr and "--api-key" in result.stderr
    env = worker_env({"ASSAY_API_URL": f"http://127.0.0.1:{free_port()}", "ASSAY_API_KEY": API_KEY})
    result = assay("status", "00000000-0000-0000-0000-000000000000", env=env)
    assert result.returncode == 4 and "cannot reach the API" in result.stderr


def test_run_with_a_dataset_scores_queries_offline(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")} | {"PYTHONPATH": str(REPO)}
    out = tmp_path / "r.jsonl"
    result = assay(
        "run", str(REPO / "examples" / "kql_dataset_items.jsonl"), "--suite", "kql_strict",
        "--dataset", f"storm={REPO / 'examples' / 'datasets' / 'storm'}",
        "--db", str(tmp_path / "x.db"), "--out", str(out), env=env, cwd=tmp_path, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dataset storm:" in result.stderr and "No hostname" not in result.stderr
    scores = {r["external_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert scores["storm-equivalent-rewrite"]["passed"] is True
    assert scores["storm-dropped-filter"]["passed"] is False
    assert scores["storm-engine-gap"]["components"]["results_match"]["status"] == "skipped"
    bad = assay("run", str(EXAMPLES), "--suite", "kql", "--dataset", "nopath", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "NAME=PATH" in bad.stderr


def test_submit_wait_prints_live_results(api_server, live_worker_factory):
    live_worker_factory()
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    result = assay("submit", str(EXAMPLES), "--suite", "kql", "--wait", env=env)
    assert result.returncode == 0, result.stderr
    for external_id in ["perfect-match", "minor-differences", "failed-query", "did-not-execute"]:
        assert external_id in result.stderr
    assert result.stderr.count("Score: ") == 4
    quiet = assay("submit", str(EXAMPLES), "--suite", "kql", "--wait", "--no-live", env=env)
    assert quiet.returncode == 0 and "Score: " not in quiet.stderr


def test_submit_wait_fail_under_exits_1_and_writes_junit(api_server, live_worker_factory, tmp_path):
    import xml.etree.ElementTree as ET

    live_worker_factory()
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    junit = tmp_path / "junit.xml"
    gated = assay("submit", str(EXAMPLES), "--suite", "kql", "--wait", "--no-live", "--fail-under", "1",
                  "--junit", str(junit), env=env)
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "✗ fail_under: pass rate" in gated.stdout and "is under 100%" in gated.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert {"perfect-match", "minor-differences", "failed-query", "did-not-execute", "fail_under"} == set(cases)
    # Without a judge key every score is partial, and a partial item cannot pass a CI check.
    assert cases["perfect-match"].find("failure").get("message").startswith("partial: a component was skipped")
    assert cases["fail_under"].find("failure").get("message").startswith("pass rate 0.0% (0 of 4 items)")

    batch_id = gated.stdout.splitlines()[0]
    status = assay("status", batch_id, "--json", env=env)
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "completed"
    usage = assay("submit", str(EXAMPLES), "--suite", "kql", "--fail-under", "0.5", env=env)
    assert usage.returncode == 2 and "add --wait" in usage.stderr


def test_diff_prints_aggregates_and_flips_and_writes_csv(api_server, tmp_path):
    from assay.scoring.store.db import transaction
    from tests.scoring.test_diff import NEW, OLD, seed_known_case

    with transaction() as session:
        seed_known_case(session)
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY, "COLUMNS": "200"})
    out = tmp_path / "diff.csv"
    result = assay("diff", "--suite", "s1", "--from", OLD[:8], "--to", NEW, "--csv", str(out), "--limit", "1", env=env)
    assert result.returncode == 0, result.stderr
    lines = [" ".join(line.replace("│", " ").split()) for line in result.stdout.splitlines()]
    for expected in [
        "items compared 4", "only under from / only under to 1 / 1", "mean total old → new 0.625 → 0.688",
        "mean delta [95 % CI] +0.062 [", "pass→fail / fail→pass 1 / 1 · McNemar p = 1", "a shift (n=4) +0.125 [",
        "b shift (n=2) -0.250 [-0.500, +0.000] · no noise floor measured", "wins / ties / losses of to 3 / 0 / 1",
        "cost of the run (USD) 1.3750", "largest |delta| (1 of 4)", "q2 1.000 0.500 -0.500 pass→fail –", "flips (1 of 2)",
    ]:
        assert any(expected in line for line in lines), (expected, result.stdout)
    rows = out.read_text().splitlines()
    assert rows[0] == "item_id,external_id,old_total,new_total,delta,old_passed,new_passed,flip,beyond_noise"
    assert len(rows) == 5
    as_json = json.loads(assay("diff", "--suite", "s1", "--from", OLD, "--to", NEW, "--json", env=env).stdout)
    assert as_json["summary"]["items_compared"] == 4 and as_json["flips_total"] == 2
    unknown = assay("diff", "--suite", "s1", "--from", OLD, "--to", "deadbeef", env=env)
    assert unknown.returncode == 2 and "404" in unknown.stderr and "deadbeef" in unknown.stderr


def test_run_stops_with_the_error_when_tasks_keep_failing(tmp_path):
    # A store that refuses every claim (a trigger standing in for a broken database): the error is
    # shown once as it happens, and the run stops with it instead of waiting forever.
    import sqlite3

    from assay.scoring.store.db import migrate

    db = tmp_path / "broken.db"
    migrate(f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_claims BEFORE UPDATE ON score_components "
            "BEGIN SELECT RAISE(ABORT, 'the disk says no'); END"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")} | {
        "PYTHONPATH": str(REPO), "ASSAY_EMBEDDED_STALL_SECONDS": "3",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    started = time.monotonic()
    result = assay("run", str(EXAMPLES), "--suite", "kql", "--db", str(db), "--no-live", env=env, cwd=tmp_path, timeout=110)
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert output.count("worker error:") >= 1 and "the disk says no" in output
    assert "stopped: nothing finished for" in output
    # The tracebacks are in the worker's log beside the database, not on the terminal.
    assert "Traceback" not in output and "the disk says no" in (tmp_path / "broken.log").read_text()
    assert time.monotonic() - started < 100
    assert not (tmp_path / "kql_items.jsonl.results.jsonl").exists()


def test_run_waits_out_a_provider_outage_without_reporting_deferrals_as_errors(tmp_path, fake_judge):
    # 529 for the first seconds: the breaker opens and judge tasks are deferred (Celery retries).
    # That is waiting, not an error: no "worker error" line, and every item is judged once it ends.
    import threading

    fake_judge.configure(default_kind="overloaded")

    def end_outage_once_the_breaker_opened() -> None:
        deadline = time.monotonic() + 100
        while fake_judge.calls()["total"] < 6 and time.monotonic() < deadline:  # 5 failures open it
            time.sleep(0.1)
        time.sleep(1.5)
        fake_judge.configure(default_kind="ok")

    threading.Thread(target=end_outage_once_the_breaker_opened, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))} | {
        "PYTHONPATH": str(REPO), "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url,
        "ASSAY_BREAKER_COOLDOWN_SECONDS": "1", "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01",
        "ASSAY_EMBEDDED_STALL_SECONDS": "2",
    }
    result = assay("run", str(EXAMPLES), "--suite", "kql", "--db", str(tmp_path / "x.db"), "--no-live",
                   "--out", str(tmp_path / "out.jsonl"), env=env, cwd=tmp_path, timeout=110)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "worker error" not in output
    calls = fake_judge.calls()["calls"]
    assert sum(c["status"] == 529 for c in calls) >= 5 and sum(c["status"] == 200 for c in calls) == 4
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["components"]["llm_grading"]["status"] for r in rows] == ["ok"] * 4
