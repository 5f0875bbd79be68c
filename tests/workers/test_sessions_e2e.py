"""Alert sessions end to end: API → Redis → a live Celery worker → Postgres, judged by the loopback fake."""

from __future__ import annotations

import pytest

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import json
import time

from sqlalchemy import select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score, ScoreComponent
from assay.scoring.store.session_models import AlternativeApproachRow, MissingToolRow
from tests.conftest import wait_for
from tests.fakes.anthropic_server import FakeAnthropic
from tests.scoring.sessions.helpers import example_sessions, make_session


@pytest.fixture
def fake_judge():
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def judged_worker(live_worker_factory, fake_judge):
    return live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )


def finished(api_client, session_id: str, timeout: float = 90.0) -> dict:
    def done():
        r = api_client.get(f"/api/v1/scoring/sessions/{session_id}/score")
        return r.json() if r.status_code == 200 and r.json()["status"] not in ("pending", "in_progress") else None

    return wait_for(done, timeout=timeout, message=f"the score of session {session_id}")


def judge_details(api_client, session_id: str) -> dict:
    item_id = api_client.get(f"/api/v1/sessions/{session_id}").json()["item_id"]
    scores = api_client.get(f"/api/v1/items/{item_id}").json()["scores"]
    return scores[-1]["components"]["judge"]["details"]


def test_a_session_scored_end_to_end(api_client, judged_worker, fake_judge):
    raw = example_sessions()[0]
    assert api_client.post("/api/v1/sessions", json=raw).status_code == 201
    r = api_client.post(f"/api/v1/scoring/sessions/{raw['session_id']}/score", json={"force_rescore": False})
    assert r.status_code == 202 and r.json()["status"] == "pending"
    body = finished(api_client, raw["session_id"])
    assert body["status"] == "completed", body
    assert 0 <= body["total_score"] <= 100 and body["is_current_criteria"] is True
    assert set(body["score_breakdown"]) == {"logical_flow", "consistency", "tool_relevance", "synthesis_quality"}
    assert body["usage"]["input_tokens"] > 0 and body["cost_usd"] > 0 and body["scored_triggered_by"] == "key:ci-tester"

    details = judge_details(api_client, raw["session_id"])
    # The rows hold exactly the verdict's feedback, in its order.
    assert body["missing_tools"] == details["missing_tools"]
    assert body["alternative_approaches"] == details["alternative_approaches"]
    assert body["total_score"] == details["total_score"]
    with transaction() as session:
        score_id = session.scalar(select(Score.id))
        assert len(session.scalars(select(MissingToolRow).where(MissingToolRow.score_id == score_id)).all()) == len(details["missing_tools"])
        assert len(session.scalars(select(AlternativeApproachRow)).all()) == len(details["alternative_approaches"])
    assert details["session_facts"]["tool_calls"] == 3 and details["session_facts"]["failed_tool_calls"] == 1
    assert details["judge_input"]["truncated"] is False and details["judge_input"]["context_window"] == 200000

    calls = fake_judge.calls()
    assert calls["total"] == 1
    assert api_client.post(f"/api/v1/scoring/sessions/{raw['session_id']}/score").status_code == 200
    assert fake_judge.calls()["total"] == 1  # the existing score is returned; the judge is not called again


def test_a_judge_returning_garbage_fails_and_force_rescore_then_works(api_client, judged_worker, fake_judge):
    fake_judge.configure(default_kind="malformed")
    api_client.post("/api/v1/sessions", json=make_session("g1"))
    assert api_client.post("/api/v1/scoring/sessions/g1/score").status_code == 202
    failed = finished(api_client, "g1")
    assert failed["status"] == "failed" and failed["total_score"] is None
    assert failed["error_message"].startswith("judge: unusable answer after one repair attempt: the answer is not JSON")
    assert fake_judge.calls()["total"] == 2  # the call and one repair
    fake_judge.configure(default_kind="ok")
    r = api_client.post("/api/v1/scoring/sessions/g1/score", json={"force_rescore": True})
    assert r.status_code == 202 and r.json()["score_id"] != failed["score_id"]
    assert finished(api_client, "g1")["status"] == "completed"


def test_a_stuck_pending_score_is_recovered_by_the_reconciler(api_client, monkeypatch, live_worker_factory, fake_judge):
    from assay.api.routes import sessions

    monkeypatch.setattr(sessions, "publish_components", lambda refs: None)  # the message is lost
    api_client.post("/api/v1/sessions", json=make_session("stuck"))
    r = api_client.post("/api/v1/scoring/sessions/stuck/score")
    assert r.status_code == 202
    live_worker_factory({"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url})
    time.sleep(1.0)
    assert api_client.get("/api/v1/scoring/sessions/stuck/score").json()["status"] == "pending"
    # Stuck: a re-score is refused while it is pending ...
    assert api_client.post("/api/v1/scoring/sessions/stuck/score", json={"force_rescore": True}).status_code == 409
    # ... until the reconciler (beat runs it every ASSAY_RECONCILE_INTERVAL_SECONDS) re-enqueues the lost work.
    from assay.workers.tasks import reconcile

    def recovered():
        reconcile.apply_async()
        return api_client.get("/api/v1/scoring/sessions/stuck/score").json()["status"] == "completed"

    wait_for(recovered, timeout=60, interval=3.0, message="the reconciler to recover the score")
    with transaction() as session:
        assert session.scalar(select(ScoreComponent.attempts)) == 1
    assert api_client.post("/api/v1/scoring/sessions/stuck/score", json={"force_rescore": True}).status_code == 202


def test_a_batch_of_sessions_and_a_rescore_set(api_client, judged_worker, fake_judge):
    completed = [s for s in example_sessions() if s["status"] == "completed"]
    body = "".join(json.dumps(s) + "\n" for s in completed).encode()
    r = api_client.post("/api/v1/batches", params={"suite": "alert_session"}, content=body)
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    wait_for(lambda: api_client.get(f"/api/v1/batches/{batch_id}").json()["status"] == "completed", timeout=90, message="the batch")
    listed = api_client.get("/api/v1/sessions", params={"scoring": "scored"}).json()
    assert {s["session_id"] for s in listed["sessions"]} == {s["session_id"] for s in completed}
    csv = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"format": "csv"}).text
    assert csv.splitlines()[0].startswith("Session ID,Status,Total Score,Logical Flow")

    api_client.post("/api/v1/sessions", json=make_session("late"))
    r = api_client.post("/api/v1/scoring/sessions/rescore", json={"select": "unscored"})
    assert r.status_code == 202 and r.json()["session_ids"] == ["late"]
    rescore_batch = r.json()["batch_id"]
    wait_for(lambda: api_client.get(f"/api/v1/batches/{rescore_batch}").json()["status"] == "completed", timeout=90, message="the re-score")
    assert finished(api_client, "late")["status"] == "completed"
