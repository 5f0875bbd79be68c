"""``assay pairwise cancel RUN`` and ``assay pairwise resume RUN`` as a user runs them: subprocesses
against a live API (the run is made and judged in this process, as in tests/api/test_pairwise_api.py):
the run printed (``--json``: the API's document), exit 2 for a run that cannot be cancelled or resumed,
an unknown run or an id that is no UUID; and ``assay pairwise A B`` still compares."""

from __future__ import annotations

import json
import uuid

from tests.api.test_pairwise_api import judge, planners, start_run, two_batches  # noqa: F401  (planners: a fixture)
from tests.cli.test_cli import api_server, assay  # noqa: F401  (api_server: a fixture)
from tests.conftest import API_KEY, worker_env
from tests.scoring.test_pipeline import plan_all


def said(text: str) -> str:
    """What a command wrote, its lines as rich wrapped them joined again."""
    return " ".join(text.split())


def test_cancel_a_pairwise_run_and_the_mistakes(api_client, planners, api_server):  # noqa: F811
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    a, b = two_batches(api_client)
    run = start_run(api_client, a, b)
    judge(plan_all(uuid.UUID(run["batch_id"]))[:2])  # one pair judged in both orders, three still queued

    cancelled = assay("pairwise", "cancel", run["id"], "--json", env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    view = json.loads(cancelled.stdout)
    assert (view["id"], view["status"], view["batch_status"], view["report"]) == (run["id"], "cancelled", "cancelled", None)
    assert (view["progress"]["completed"], view["progress"]["cancelled"]) == (1, 3)

    again = assay("pairwise", "cancel", run["id"], env=env)
    assert again.returncode == 2 and "already cancelled" in said(again.stderr) and again.stdout == ""
    not_resumable = assay("pairwise", "resume", run["id"], "--budget", "1", env=env)
    assert not_resumable.returncode == 2 and "only a budget_exhausted batch can be resumed" in said(not_resumable.stderr)
    missing = uuid.uuid4()
    for action in ("cancel", "resume"):
        unknown = assay("pairwise", action, str(missing), env=env)
        assert unknown.returncode == 2 and f"no pairwise run {missing}" in said(unknown.stderr)
        bad = assay("pairwise", action, "not-a-run", env=env)
        assert bad.returncode == 2 and "'not-a-run' is not a pairwise run id" in said(bad.stderr)
        assert "Traceback" not in unknown.stderr + bad.stderr


def test_resume_a_pairwise_run_the_budget_stopped(api_client, planners, api_server):  # noqa: F811
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    a, b = two_batches(api_client)
    run = start_run(api_client, a, b, budget_usd=0.015)  # each order costs $0.01: one pair, then the cut
    assert judge(plan_all(uuid.UUID(run["batch_id"]))) >= 1

    low = assay("pairwise", "resume", run["id"], "--budget", "0.01", env=env)
    assert low.returncode == 2 and "must exceed what the batch has spent" in said(low.stderr)
    resumed = assay("pairwise", "resume", run["id"], "--budget", "1", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"pairwise run {run['id']}: running (batch {run['batch_id']} running)" in said(resumed.stdout)
    assert "spent $0.0200 of $1.0000" in said(resumed.stdout)
    view = api_client.get(f"/api/v1/pairwise/{run['id']}").json()
    assert (view["status"], view["budget_usd"], view["report"]) == ("running", 1.0, None)


def test_pairwise_batch_ids_still_run_the_comparison(api_server):  # noqa: F811
    """Batch ids right after ``pairwise`` run ``compare`` (here: the API's 404 for unknown batches)."""
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY})
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    for args in (("pairwise", a, b, "--suite", "pairwise_api"), ("pairwise", "--suite", "pairwise_api", a, b)):
        compared = assay(*args, "--dry-run", env=env)
        assert compared.returncode == 2 and "No such command" not in compared.stderr, compared.stderr
