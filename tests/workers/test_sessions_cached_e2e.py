"""alert_session_cached end to end: a batch of alert sessions uploaded under the cache-first suite,
judged by a live Celery worker through the loopback fake, scored and its feedback stored as under
alert_session; every judgment after the first reads the whole fixed prompt from the cache."""

from __future__ import annotations

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import json

import pytest

from assay.scoring.suites.loader import load_suite
from tests.conftest import REPO, wait_for
from tests.fakes.anthropic_server import FakeAnthropic
from tests.scoring.sessions.helpers import example_sessions

SUITE = "alert_session_cached"


@pytest.fixture
def fake_judge():
    with FakeAnthropic() as fake:
        yield fake


def test_a_batch_of_sessions_scored_under_the_cached_suite(api_client, live_worker_factory, fake_judge):
    live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )
    sessions = example_sessions()
    completed = [s for s in sessions if s["status"] == "completed"]
    assert len(completed) >= 2
    body = "".join(json.dumps(s) + "\n" for s in completed).encode()
    r = api_client.post("/api/v1/batches", params={"suite": SUITE}, content=body)
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    wait_for(lambda: api_client.get(f"/api/v1/batches/{batch_id}").json()["status"] == "completed", timeout=120, message="the batch")

    cached_hash = load_suite(REPO / "config", SUITE, env={}).criteria_hash
    assert cached_hash != load_suite(REPO / "config", "alert_session", env={}).criteria_hash
    views = [api_client.get(f"/api/v1/scoring/sessions/{s['session_id']}/score").json() for s in completed]
    for view in views:
        assert view["status"] == "completed", view
        assert view["criteria_hash"] == cached_hash and view["is_current_criteria"] is True
        assert 0 <= view["total_score"] <= 100
        assert set(view["score_breakdown"]) == {"logical_flow", "consistency", "tool_relevance", "synthesis_quality"}
        assert isinstance(view["missing_tools"], list) and view["cost_usd"] > 0

    # One judge call per session; the fixed prompt (rubric, checklist, schema) is written to the cache
    # once and read by every other call: only the session's own text is sent uncached.
    assert fake_judge.calls()["total"] == len(completed)
    usages = [view["usage"] for view in views]
    writes = [u["cache_creation_input_tokens"] for u in usages if u["cache_creation_input_tokens"]]
    reads = [u["cache_read_input_tokens"] for u in usages if u["cache_read_input_tokens"]]
    assert len(writes) == 1 and len(reads) == len(completed) - 1
    assert set(reads) == set(writes)  # the same prefix
    for u in usages:
        assert u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] > 3 * u["input_tokens"]

    csv = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"format": "csv"}).text
    assert csv.splitlines()[0].startswith("Session ID,Status,Total Score,Logical Flow")
    assert len(csv.strip().splitlines()) == len(completed) + 1
