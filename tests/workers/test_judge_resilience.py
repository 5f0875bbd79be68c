"""The judge under provider trouble, through live workers: a 529 storm and a rate-limited fleet."""

from __future__ import annotations

import json
import math
import shutil
import time
import uuid

import yaml

from tests.conftest import REPO, TEST_DB, wait_for

EXAMPLES = REPO / "examples" / "kql_items.jsonl"


def unique_items(n: int) -> bytes:
    base = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    lines = []
    for i in range(n):
        # Unique ids too: ids are unique within an upload.
        source = base[i % len(base)]
        item = dict(source, id=f"{source['id']}-{i}", prompt=f"{source['prompt']} #{i}")
        lines.append(json.dumps(item))
    return ("\n".join(lines) + "\n").encode()


def judge_env(fake, **extra: str) -> dict[str, str]:
    return {
        # A fresh breaker and rate window per test: another test's calls must not count here.
        "ASSAY_REDIS_KEY_PREFIX": f"{TEST_DB}:{uuid.uuid4().hex[:8]}",
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": fake.base_url,
        "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01",
        **extra,
    }


def test_529_storm_opens_the_breaker_defers_and_recovers(api_client, live_worker_factory, fake_judge, monkeypatch):
    from assay.settings import get_settings

    cooldown = 2.0
    storm = 15
    env = judge_env(fake_judge, ASSAY_BREAKER_COOLDOWN_SECONDS=str(cooldown))
    monkeypatch.setattr(get_settings(), "redis_key_prefix", env["ASSAY_REDIS_KEY_PREFIX"])
    monkeypatch.setattr(get_settings(), "breaker_cooldown_seconds", cooldown)
    live_worker_factory(env, concurrency=4)
    fake_judge.script({"kind": "overloaded", "times": storm})
    r = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(12))
    batch_id = r.json()["batch_id"]

    def breaker_open():
        rows = api_client.get("/api/v1/judge/status").json()["breakers"]
        return next((row for row in rows if row["state"] in ("open", "half_open")), None)

    opened = wait_for(breaker_open, timeout=60, interval=0.05, message="the breaker to open")
    assert opened["model"] == "claude-haiku-5-5" and opened["next_probe_at"] is not None

    def finished():
        view = api_client.get(f"/api/v1/batches/{batch_id}").json()
        return view if view["status"] == "completed" else None

    view = wait_for(finished, timeout=120, message="the batch to finish after the outage")
    assert view["progress"]["completed"] == 12 and view["progress"]["errored"] == 0

    calls = fake_judge.calls()
    # Every item judged exactly once; besides that only the scripted failures were sent.
    assert len(calls["answered"]) == 12 and set(calls["answered"].values()) == {1}
    assert calls["total"] == storm + 12
    # While open, only probes go out: one per cool-down (calls in flight when it opened may land).
    ordered = sorted(calls["calls"], key=lambda c: c["at"])
    failures = [c for c in ordered if c["status"] != 200]
    first_ok = next(c["at"] for c in ordered if c["status"] == 200)
    opened_at = failures[4]["at"]  # the fifth consecutive failure opens it
    during = [c for c in ordered if opened_at + 1.0 < c["at"] < first_ok]
    assert len(during) <= math.ceil((first_ok - opened_at) / cooldown) + 1
    for earlier, later in zip(during, during[1:]):
        assert later["at"] - earlier["at"] >= cooldown * 0.8
    assert api_client.get("/api/v1/judge/status").json()["breakers"][0]["state"] == "closed"


def test_governor_paces_a_fleet_of_two_workers_at_requests_per_minute(
    api_client, live_worker_factory, fake_judge, tmp_path
):
    rpm = 12  # one call every 5 s, whichever of the two workers sends it
    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    models = yaml.safe_load((config / "models.yaml").read_text())
    models["models"]["claude-haiku-5-5"]["requests_per_minute"] = rpm
    (config / "models.yaml").write_text(yaml.safe_dump(models))
    env = judge_env(fake_judge, ASSAY_CONFIG_DIR=str(config))
    live_worker_factory(env, concurrency=4)
    live_worker_factory(env, concurrency=4)
    r = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(20))
    batch_id = r.json()["batch_id"]
    wait_for(lambda: fake_judge.calls()["total"] >= 4, timeout=90, message="four paced calls")
    arrivals = sorted(c["at"] for c in fake_judge.calls()["calls"])
    # Spread at the limit's pace across the fleet (a minute's window would have sent 12 at once).
    gaps = [round(later - earlier, 2) for earlier, later in zip(arrivals, arrivals[1:])]
    assert all(gap >= 60 / rpm - 0.5 for gap in gaps), gaps
    states = _judge_components_by_state(batch_id)
    # Calls whose turn is more than 30 s away are deferred (no attempt spent), never failed.
    assert not states.keys() - {"ok", "pending", "in_progress", "deferred by the rate governor"}, states
    assert api_client.get(f"/api/v1/batches/{batch_id}").json()["progress"]["errored"] == 0
    api_client.post(f"/api/v1/batches/{batch_id}/cancel")


def _judge_components_by_state(batch_id: str) -> dict[str, int]:
    """The kql judge components (llm_grading) of a batch, counted by status; "deferred by the rate
    governor" apart from other deferrals."""
    from collections import Counter

    from sqlalchemy import select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Score, ScoreComponent

    with transaction() as session:
        rows = session.execute(
            select(ScoreComponent.status, ScoreComponent.reason)
            .join(Score, Score.id == ScoreComponent.score_id)
            .where(Score.batch_id == uuid.UUID(batch_id), ScoreComponent.component == "llm_grading")
        ).all()
    return dict(
        Counter(
            "deferred by the rate governor" if status == "deferred" and "rate governor" in (reason or "") else status
            for status, reason in rows
        )
    )


def _finished(api_client, batch_id):
    def finished():
        view = api_client.get(f"/api/v1/batches/{batch_id}").json()
        return view if view["status"] == "completed" else None

    return finished


def test_an_outage_outlasting_twenty_deferrals_is_waited_out(api_client, live_worker_factory, fake_judge):
    # Celery's own retry limit for a task is 20: a deferral must not be counted against it. A breaker
    # that opens at the first 529 with a 0.1 s cool-down defers the one judge task over and over.
    env = judge_env(fake_judge, ASSAY_BREAKER_THRESHOLD="1", ASSAY_BREAKER_COOLDOWN_SECONDS="0.1")
    worker = live_worker_factory(env, concurrency=2)
    fake_judge.configure(default_kind="overloaded")
    batch_id = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(1)).json()["batch_id"]
    wait_for(
        lambda: worker.log.read_text(errors="replace").count("] retry: ") >= 30,
        timeout=90, interval=0.2, message="30 deferrals of the judge task",
    )
    assert "raised unexpected" not in worker.log.read_text(errors="replace")
    fake_judge.configure(default_kind="ok")
    view = wait_for(_finished(api_client, batch_id), timeout=60, message="the batch to finish after the outage")
    assert view["progress"]["completed"] == 1 and view["progress"]["errored"] == 0
    assert fake_judge.calls()["answered"] and set(fake_judge.calls()["answered"].values()) == {1}


def test_a_judge_call_slower_than_its_lease_keeps_it_by_the_heartbeat(api_client, live_worker_factory, fake_judge):
    from assay.scoring.pipeline.reconcile import reconcile
    from assay.scoring.store.db import transaction

    lease = 4
    fake_judge.configure(latency=lease * 2.0)
    env = judge_env(fake_judge, ASSAY_JUDGE_LEASE_SECONDS=str(lease), ASSAY_METRICS_LEASE_SECONDS=str(lease))
    live_worker_factory(env, concurrency=2)
    batch_id = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(1)).json()["batch_id"]
    wait_for(lambda: fake_judge.calls()["total"] == 1, timeout=30, message="the judge call to be in flight")
    time.sleep(lease * 1.5)  # the call is still in flight, well past the lease it was claimed with

    with transaction() as session:  # the reconciler finds nothing lost: the lease was renewed
        lost = reconcile(session, requeue_after_seconds=3600).refs
    assert [ref.component for ref in lost] == []
    view = wait_for(_finished(api_client, batch_id), timeout=60, message="the batch to finish")
    assert view["progress"]["completed"] == 1 and fake_judge.calls()["total"] == 1
