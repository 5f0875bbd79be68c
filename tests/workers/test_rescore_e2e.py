"""Re-scoring end to end: the API and CLI start a run that a live worker builds and scores; a run killed
halfway and run again makes no duplicate and pays no judge call twice; two beats firing the nightly
run create one batch per suite; a budget stops judge calls on a live worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

from sqlalchemy import func, select

from assay.scoring.rescoring import rescore
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Score, SuiteRecord
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import load_suite
from assay.settings import get_settings
from tests.conftest import wait_for, worker_env
from tests.workers.test_end_to_end import EXAMPLES, submit, wait_finished
from tests.workers.test_judge_resilience import unique_items

CONFIG = get_settings().config_dir
NEW_MODEL = "claude-sonnet-5-5"


def judge_env(fake_judge, **extra: str) -> dict[str, str]:
    return {
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": fake_judge.base_url,
        "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01",
        **extra,
    }


def switch_criteria(model: str) -> str:
    """Make ``model`` the kql judge (a criteria change) here; workers started with the same
    ASSAY_KQL_JUDGE_MODEL register the same hash on every reconcile."""
    suite = load_suite(CONFIG, "kql", env={"ASSAY_KQL_JUDGE_MODEL": model})
    with transaction() as s:
        register_suite(s, suite)
    return suite.criteria_hash


def current_hash(suite: str = "kql") -> str:
    with transaction() as s:
        return s.get(SuiteRecord, suite).current_criteria_hash


def scores_per_hash(batch_id: str) -> dict[str, int]:
    with transaction() as s:
        items = select(Score.item_id).where(Score.batch_id == uuid.UUID(batch_id))
        return dict(
            s.execute(
                select(Score.criteria_hash, func.count()).where(Score.item_id.in_(items), Score.status == "completed").group_by(Score.criteria_hash)
            ).all()
        )


def test_rescore_after_a_criteria_change_via_api_then_nothing_left(api_client, live_worker_factory, fake_judge):
    # The kql judge's prompt prefix is under its model's minimum cacheable length: uncached, as on the API.
    fake_judge.configure(min_cacheable_tokens=1024)
    worker = live_worker_factory(judge_env(fake_judge))
    old_hash = current_hash()
    first = submit(api_client, EXAMPLES.read_bytes())
    assert wait_finished(api_client, first)["status"] == "completed"
    worker.stop()

    new_hash = switch_criteria(NEW_MODEL)
    live_worker_factory(judge_env(fake_judge, ASSAY_KQL_JUDGE_MODEL=NEW_MODEL))
    dry = api_client.post("/api/v1/rescore", json={"suite": "kql", "dry_run": True})
    assert dry.status_code == 200, dry.text
    estimate = dry.json()["estimate"]
    assert dry.json()["batch_id"] is None and dry.json()["criteria_hash"] == new_hash
    assert (estimate["items"], estimate["judge_calls"]) == (4, 4)
    assert estimate["output_basis"] == "history" and estimate["cost_usd"] > 0  # the first batch's judgments

    r = api_client.post("/api/v1/rescore", json={"suite": "kql"})
    assert r.status_code == 202, r.text
    run_id = r.json()["batch_id"]
    view = wait_finished(api_client, run_id)
    assert view["status"] == "completed" and view["total_items"] == 4 and view["criteria_hash"] == new_hash
    # The dry run's estimate against what the run cost: within 20 % when the fake caches as the API does.
    assert abs(estimate["cost_usd"] - view["summary"]["cost_usd"]) <= 0.2 * view["summary"]["cost_usd"], (estimate, view["summary"])
    assert scores_per_hash(first) == {old_hash: 4, new_hash: 4}, "old scores are kept as history"
    # One judge call per item per criteria, none repeated (the fake keys calls by the item's prompt).
    assert set(fake_judge.calls()["counts"].values()) == {2}

    again = api_client.post("/api/v1/rescore", json={"suite": "kql"})
    assert again.status_code == 200 and again.json()["batch_id"] is None and again.json()["estimate"]["items"] == 0
    unknown = api_client.post("/api/v1/rescore", json={"suite": "nope"})
    assert unknown.status_code == 404
    bad = api_client.post("/api/v1/rescore", json={"suite": "kql", "lane": "pigeon"})
    assert bad.status_code == 422
    partial = api_client.post("/api/v1/rescore", json={"suite": "kql", "partial": True})
    assert partial.status_code == 409 and "ANTHROPIC_API_KEY" in partial.json()["message"]


def test_a_run_killed_halfway_and_run_again_scores_each_item_once(api_client, live_worker_factory, fake_judge):
    worker = live_worker_factory(judge_env(fake_judge))
    first = submit(api_client, EXAMPLES.read_bytes())
    assert wait_finished(api_client, first)["status"] == "completed"
    worker.stop()
    new_hash = switch_criteria(NEW_MODEL)

    # The run dies after its first wave: a batch with 2 of the 4 scores, never planned.
    with transaction() as s:
        killed = rescore.begin_run(s, "kql", rescore.Selection(), triggered_by="t", lane="realtime", budget_usd=None, scheduled=True)
        killed_id = killed.id
    with transaction() as s:
        assert rescore.add_wave(s, killed_id, rescore.Selection(), None, 2) is not None

    live_worker_factory(judge_env(fake_judge, ASSAY_KQL_JUDGE_MODEL=NEW_MODEL))
    rerun = api_client.post("/api/v1/rescore", json={"suite": "kql"})
    assert rerun.status_code == 202 and rerun.json()["estimate"]["items"] == 2, rerun.text
    # The rerun takes the other two; the reconciler (beat's, sent here) plans the dead run's batch once
    # its planner has been silent for ASSAY_REQUEUE_AFTER_SECONDS.
    from assay.workers.tasks import reconcile

    def reconciled() -> bool:
        reconcile.apply_async()
        with transaction() as s:
            return s.get(Batch, killed_id).status != "planning"

    wait_for(reconciled, timeout=60, interval=2.0, message="the reconciler to plan the dead run's batch")
    for batch_id in (str(killed_id), rerun.json()["batch_id"]):
        view = wait_finished(api_client, batch_id, timeout=120)
        assert view["status"] == "completed" and view["total_items"] == 2
    with transaction() as s:
        per_item = s.execute(
            select(Score.item_id, func.count()).where(Score.criteria_hash == new_hash).group_by(Score.item_id)
        ).all()
    assert len(per_item) == 4 and {n for _, n in per_item} == {1}
    assert set(fake_judge.calls()["counts"].values()) == {2}


def test_two_beats_fire_the_nightly_run_once(clean_db, live_worker_factory, tmp_path):
    from tests.scoring.test_pipeline import make_batch
    from tests.scoring.test_rescore import complete_all

    batch_id, _ = make_batch(3)
    complete_all(batch_id)
    new_hash = switch_criteria(NEW_MODEL)
    env = {"ASSAY_KQL_JUDGE_MODEL": NEW_MODEL, "ASSAY_RESCORE_SCHEDULE": "* * * * *"}
    worker = live_worker_factory(env)
    beats = []
    try:
        for n in range(2):
            home = tmp_path / f"beat{n}"
            home.mkdir()
            beats.append(
                subprocess.Popen(
                    [sys.executable, "-m", "assay.cli", "beat"],
                    env=worker_env({**env, "ASSAY_BEAT_SCHEDULE_FILE": str(home / "schedule")}),
                    cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                )
            )
        # Both beats fire at the next minute boundary; the worker runs both messages.
        wait_for(
            lambda: worker.log.read_text().count("Task scoring.rescore_stale") >= 2,
            timeout=150, interval=1.0, message="both beats' nightly runs to execute",
        )
    finally:
        for beat in beats:
            os.killpg(beat.pid, signal.SIGTERM)
            beat.wait(timeout=20)
    with transaction() as s:
        runs = s.scalars(select(Batch).where(Batch.suite_name == "kql", Batch.criteria_hash == new_hash)).all()
        assert len(runs) == 1, [(b.id, b.total_items) for b in runs]
        assert runs[0].total_items == 3 and runs[0].summary["rescore"]["scheduled"] is True
        assert s.scalar(select(func.count()).where(Score.criteria_hash == new_hash)) == 3
    log = worker.log.read_text()
    assert "another run holds the lock" in log or log.count("score(s) to make") >= 2


def test_budget_stops_a_live_batch_and_resume_finishes_it(api_client, live_worker_factory, fake_judge):
    live_worker_factory(judge_env(fake_judge), concurrency=1)
    fake_judge.configure(latency=0.2)
    body = unique_items(12)  # one judgment costs ~$0.0005 with haiku
    r = api_client.post("/api/v1/batches", params={"suite": "kql", "budget_usd": 0.0001}, content=body)
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["budget_usd"] == 0.0001 and accepted["estimate"]["judge_calls"] == 12
    # Planned scores are cancelled as their judge tasks arrive; finished_at says the last one has.
    view = wait_for(
        lambda: (v := api_client.get(f"/api/v1/batches/{accepted['batch_id']}").json())["finished_at"] and v,
        timeout=120, message="the budget-stopped batch to settle",
    )
    assert view["status"] == "budget_exhausted", view
    assert view["spent_usd"] >= 0.0001
    judged = fake_judge.calls()["total"]
    assert 1 <= judged < 12, "judge calls stop once the spend reaches the budget"
    p = view["progress"]
    assert p["completed"] >= 1 and p["cancelled"] >= 1 and p["completed"] + p["cancelled"] + p["errored"] == 12

    resumed = api_client.post(f"/api/v1/batches/{accepted['batch_id']}/resume", json={"budget_usd": None})
    assert resumed.status_code == 200, resumed.text
    view = wait_finished(api_client, accepted["batch_id"], timeout=120)
    assert view["status"] == "completed" and view["progress"]["completed"] == 12
    # Each item judged once: the resumed scores' calls were never made before.
    assert fake_judge.calls()["total"] == 12 and set(fake_judge.calls()["counts"].values()) == {1}
