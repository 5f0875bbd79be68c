"""The alert-session API (the alert-session scoring design, TARSy EP-0028): every status code, the exact response shape,
attribution, criteria changes, lists, analytics, curation, re-scoring a set, the history service.

Scores run in this process: published component refs are captured and computed here, the judge
answering scripted verdicts (``StubJudge``). tests/workers/test_sessions_e2e.py runs them through a
live worker and the loopback Anthropic fake.
"""

from __future__ import annotations

import pytest

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from assay.scoring.pipeline.planning import plan_chunk
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import load_suite
from tests.conftest import API_KEY, REPO
from tests.fakes.history_server import FakeHistory
from tests.scoring.sessions.helpers import (
    VERDICT,
    StubJudge,
    example_sessions,
    iter_lines,
    make_session,
    run_refs,
)

GOLDEN = REPO / "tests" / "scoring" / "sessions" / "golden" / "session_score.json"
PROXY = ("10.255.255.254", 40000)
ORIGIN = "http://testserver"  # the test client's own site


@pytest.fixture
def stub_judge(monkeypatch):
    stub = StubJudge()
    monkeypatch.setattr("assay.scoring.judge.service.run_judge", stub)
    return stub


def _client(monkeypatch, **kwargs: Any):
    from fastapi.testclient import TestClient

    from assay.api.app import create_app
    from assay.api.routes import sessions

    published: list[Any] = []
    planned: list[Any] = []
    monkeypatch.setattr(sessions, "publish_components", lambda refs: published.extend(refs))
    monkeypatch.setattr(sessions, "start_planner", lambda batch_id: planned.append(batch_id))
    client = TestClient(create_app(), **kwargs)
    client.published = published  # type: ignore[attr-defined]
    client.planned = planned  # type: ignore[attr-defined]
    return client


@pytest.fixture
def api(clean_db, monkeypatch, stub_judge):
    with _client(monkeypatch, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        yield client


def run(client) -> None:
    refs, client.published[:] = list(client.published), []
    run_refs(refs)


def run_batches(client) -> None:
    """Plan every captured batch here and run its components, as the planner and a worker would."""
    for batch_id in list(client.planned):
        while True:
            with transaction() as session:
                step = plan_chunk(session, batch_id, 100)
            run_refs(step.refs)
            if step.finished:
                break
    client.planned[:] = []


def post(client, raw: dict, **kwargs: Any):
    return client.post("/api/v1/sessions", json=raw, **kwargs)


def score(client, session_id: str, body: dict | None = None, **kwargs: Any):
    return client.post(f"/api/v1/scoring/sessions/{session_id}/score", json=body, **kwargs)


def scored(client, session_id: str, **kwargs: Any) -> dict:
    r = score(client, session_id, **kwargs)
    assert r.status_code == 202, r.text
    run(client)
    done = client.get(f"/api/v1/scoring/sessions/{session_id}/score")
    assert done.status_code == 200 and done.json()["status"] == "completed", done.text
    return done.json()


def change_criteria(tmp_path: Path) -> str:
    """Edit the judge prompt in a copy of the config and make that the suite's current criteria."""
    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    prompt = config / "prompts" / "alert_session_judge.md"
    prompt.write_text(prompt.read_text().replace("EXTREME CRITICAL RIGOR", "CRITICAL RIGOR"))
    with transaction() as session:
        return register_suite(session, load_suite(config, "alert_session"))


# --- sessions in ------------------------------------------------------------------------------------------


def test_post_session_creates_updates_versions_and_refuses(api):
    r = post(api, make_session("s1", status="in_progress"))
    assert r.status_code == 201 and r.json()["outcome"] == "created" and r.json()["status"] == "in_progress"
    item_id = r.json()["item_id"]
    r = post(api, make_session("s1", status="in_progress"))
    assert r.status_code == 200 and r.json()["outcome"] == "unchanged" and r.json()["item_id"] == item_id
    r = post(api, make_session("s1"))  # it completed
    assert r.status_code == 200 and r.json()["outcome"] == "updated" and r.json()["item_id"] == item_id
    scored(api, "s1")
    r = post(api, make_session("s1", final_analysis="Revised."))
    assert r.status_code == 200 and r.json()["outcome"] == "versioned" and r.json()["item_id"] != item_id
    one = api.get("/api/v1/sessions/s1").json()
    assert one["versions"] == 2 and one["session"]["final_analysis"] == "Revised."
    assert one["latest_score"]["status"] == "completed"  # scores are history: the old one is still the latest

    assert post(api, {**make_session("bad"), "surprise": 1}).status_code == 422
    assert post(api, {"session_id": "bad", "status": "completed"}).status_code == 422
    nul = make_session("nul")
    nul["final_analysis"] = "a\x00b"
    r = post(api, nul)
    assert r.status_code == 422 and "NUL" in r.json()["message"]
    assert api.post("/api/v1/sessions", json=make_session("x"), headers={"Authorization": ""}).status_code == 401
    assert api.get("/api/v1/sessions/none").status_code == 404


def test_post_session_over_the_size_limit_is_413(api, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_session_bytes", 500)
    r = post(api, make_session("big"))
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    # Streamed without a Content-Length: cut off at the limit all the same.
    body = json.dumps(make_session("big")).encode()
    r = api.post("/api/v1/sessions", content=(body[i : i + 100] for i in range(0, len(body), 100)),
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert api.get("/api/v1/sessions").json()["total"] == 0
    monkeypatch.setattr(get_settings(), "max_session_bytes", 1_000_000)
    assert post(api, make_session("big")).status_code == 201


# --- the EP's endpoints: every status code ----------------------------------------------------------------


def test_score_status_codes(api, stub_judge):
    assert score(api, "unknown").status_code == 404
    assert api.get("/api/v1/scoring/sessions/unknown/score").status_code == 404
    post(api, make_session("running", status="in_progress"))
    r = score(api, "running")
    assert r.status_code == 400 and "not completed" in r.json()["message"]
    post(api, make_session("s1"))
    r = api.get("/api/v1/scoring/sessions/s1/score")
    assert r.status_code == 404 and "has not been scored" in r.json()["message"]

    created = score(api, "s1")  # no body at all: force_rescore defaults to false
    assert created.status_code == 202 and created.json()["status"] == "pending"
    assert created.headers["Location"] == "/api/v1/scoring/sessions/s1/score"
    first_id = created.json()["score_id"]
    again = score(api, "s1", {"force_rescore": False})
    assert again.status_code == 202 and again.json()["score_id"] == first_id  # the one in flight, not a new one
    r = score(api, "s1", {"force_rescore": True})
    assert r.status_code == 409 and r.json()["details"]["score_id"] == first_id
    assert api.get("/api/v1/scoring/sessions/s1/score").status_code == 200  # GET: the latest, whatever its status
    assert api.get("/api/v1/scoring/sessions/s1/score").json()["status"] == "pending"

    run(api)
    done = score(api, "s1")
    assert done.status_code == 200 and done.json()["score_id"] == first_id and done.json()["total_score"] == 67
    forced = score(api, "s1", {"force_rescore": True})
    assert forced.status_code == 202 and forced.json()["score_id"] != first_id
    run(api)
    latest = api.get("/api/v1/scoring/sessions/s1/score").json()
    assert latest["score_id"] == forced.json()["score_id"]
    assert score(api, "s1", {"force_rescore": "yes please"}).status_code == 422
    assert score(api, "s1", {"force": True}).status_code == 422
    assert len(stub_judge.requests) == 2


def test_a_failed_score_is_returned_with_its_message_and_force_rescore_then_works(api, stub_judge):
    post(api, make_session("s1"))
    stub_judge.answers.append("unusable answer after one repair attempt: the answer is not JSON (Expecting value)")
    score(api, "s1")
    run(api)
    failed = score(api, "s1")
    body = failed.json()
    assert failed.status_code == 200 and body["status"] == "failed"
    assert body["error_message"].startswith("judge: unusable answer after one repair attempt")
    assert body["total_score"] is None and body["missing_tools"] == [] and body["scored_at"] is None
    assert body["completed_at"] is not None
    forced = score(api, "s1", {"force_rescore": True})
    assert forced.status_code == 202
    run(api)
    assert api.get("/api/v1/scoring/sessions/s1/score").json()["status"] == "completed"


def _normalised(body: dict) -> dict:
    out = dict(body)
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
    assert re.fullmatch(r"[0-9a-f-]{36}", out["score_id"]) and re.fullmatch(r"[0-9a-f]{64}", out["criteria_hash"])
    out["score_id"], out["criteria_hash"] = "<uuid>", "<sha256>"
    for key in ("scored_at", "started_at", "completed_at"):
        assert out[key] is None or iso.match(out[key]), out[key]
        out[key] = "<timestamp>" if out[key] else None
    return out


def test_golden_response_shape(api):
    post(api, make_session("7c9e6679-7425-40de-944b-e07fc1f90ae7"))
    body = scored(api, "7c9e6679-7425-40de-944b-e07fc1f90ae7")
    expected = json.loads(GOLDEN.read_text())
    got = _normalised(body)
    assert list(got) == list(expected)  # the fields, in order
    assert got == expected
    posted = _normalised(score(api, "7c9e6679-7425-40de-944b-e07fc1f90ae7").json())
    assert posted == expected  # POST answers the same shape as GET
    schema = api.get("/openapi.json").json()["components"]["schemas"]["SessionScoreOut"]
    assert list(schema["properties"]) == list(expected)


# --- attribution ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_addr", "headers", "status", "who"),
    [
        # The proxy's users are browsers: a same-origin Origin (or the page's CSRF token) is required.
        (PROXY, {"X-Forwarded-User": "alice", "X-Forwarded-Email": "alice@example.com", "Origin": ORIGIN}, 202, "proxy:alice"),
        (PROXY, {"X-Forwarded-Email": "bob@example.com", "Origin": ORIGIN}, 202, "proxy:bob@example.com"),
        (PROXY, {"Authorization": f"Bearer {API_KEY}"}, 202, "key:ci-tester"),
        # Not from the trusted proxy: the headers are ignored, the key decides.
        (("192.0.2.7", 40000), {"X-Forwarded-User": "mallory", "Authorization": f"Bearer {API_KEY}"}, 202, "key:ci-tester"),
        (("192.0.2.7", 40000), {"X-Forwarded-User": "mallory"}, 401, None),
        (PROXY, {}, 401, None),
    ],
)
def test_attribution_and_the_trusted_proxy_rule(clean_db, monkeypatch, stub_judge, client_addr, headers, status, who):
    with _client(monkeypatch, client=client_addr) as client:
        assert post(client, make_session("s1"), headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 201
        r = score(client, "s1", headers=headers)
        assert r.status_code == status, r.text
        if who is not None:
            assert r.json()["scored_triggered_by"] == who
            with transaction() as session:
                assert session.scalar(select(Score.triggered_by)) == who


# --- criteria changes -------------------------------------------------------------------------------------


def test_prompt_change_makes_scores_stale_and_rescoring_refreshes_them(api, tmp_path):
    post(api, make_session("s1"))
    old = scored(api, "s1")
    assert old["is_current_criteria"] is True
    new_hash = change_criteria(tmp_path)
    assert new_hash != old["criteria_hash"]
    stale = score(api, "s1")
    assert stale.status_code == 200 and stale.json()["is_current_criteria"] is False  # returned as is, not re-scored
    assert api.get("/api/v1/sessions").json()["sessions"][0]["latest_score"]["is_current_criteria"] is False
    fresh = score(api, "s1", {"force_rescore": True})
    assert fresh.status_code == 202 and fresh.json()["criteria_hash"] == new_hash and fresh.json()["is_current_criteria"]
    run(api)
    assert api.get("/api/v1/scoring/sessions/s1/score").json()["is_current_criteria"] is True


# --- listing ----------------------------------------------------------------------------------------------


def test_list_sessions_filters_and_sorts(api, stub_judge):
    for sid in ("a", "b", "c", "d"):
        post(api, make_session(sid))
    post(api, make_session("e", status="in_progress"))
    stub_judge.answers += [{**VERDICT, "total_score": 90}, {**VERDICT, "total_score": 40}]
    scored(api, "a")
    scored(api, "b")
    stub_judge.answers.append("unusable answer after one repair attempt: garbage")
    score(api, "c")
    run(api)

    def ids(**params):
        r = api.get("/api/v1/sessions", params=params)
        assert r.status_code == 200, r.text
        return [s["session_id"] for s in r.json()["sessions"]]

    everything = api.get("/api/v1/sessions").json()
    assert everything["total"] == 5
    rows = {s["session_id"]: s for s in everything["sessions"]}
    assert rows["a"]["scoring_status"] == "completed" and rows["a"]["latest_score"]["total_score"] == 90
    assert rows["c"]["scoring_status"] == "failed" and "garbage" in rows["c"]["latest_score"]["error_message"]
    assert rows["d"]["scoring_status"] == "not_scored" and rows["d"]["latest_score"] is None
    assert rows["e"]["status"] == "in_progress" and rows["a"]["alert_type"] == "SuspiciousBinary"
    assert sorted(ids(scoring="scored")) == ["a", "b"]
    assert sorted(ids(scoring="not_scored")) == ["d", "e"]
    assert ids(scoring="failed") == ["c"]
    assert ids(min_score=85) == ["a"]
    assert ids(min_score=40, sort="score_asc") == ["b", "a"]
    assert ids(sort="score_desc")[:2] == ["a", "b"]
    assert sorted(ids(status="in_progress")) == ["e"]
    page = api.get("/api/v1/sessions", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 5 and len(page["sessions"]) == 2
    assert api.get("/api/v1/sessions", params={"scoring": "bogus"}).status_code == 422
    assert api.get("/api/v1/sessions", params={"min_score": 101}).status_code == 422


def test_sessions_uploaded_through_the_batch_api_are_sessions(api):
    body = "".join(json.dumps(s) + "\n" for s in example_sessions())
    r = api.post("/api/v1/batches", params={"suite": "alert_session"}, content=body.encode())
    assert r.status_code == 202, r.text
    listed = {s["session_id"]: s for s in api.get("/api/v1/sessions").json()["sessions"]}
    assert set(listed) == {s["session_id"] for s in example_sessions()}
    with transaction() as session:
        assert set(session.scalars(select(Item.external_id))) == set(listed)


# --- use cases --------------------------------------------------------------------------------------------


def test_missing_tools_analytics(api, stub_judge, tmp_path):
    tools = lambda *names: [{"tool_name": n, "rationale": f"needed {n}"} for n in names]
    for sid in ("s1", "s2", "s3"):
        post(api, make_session(sid))
    stub_judge.answers += [
        {**VERDICT, "missing_tools": tools("read-file", "list-processes-in-pod")},
        {**VERDICT, "missing_tools": tools("Read_File", "kubectl-logs", "read file")},
        {**VERDICT, "missing_tools": tools("kubectl logs")},
    ]
    for sid in ("s1", "s2", "s3"):
        scored(api, sid)
    report = api.get("/api/v1/scoring/missing-tools").json()
    assert report["scores_considered"] == 3 and report["sessions_considered"] == 3
    by_name = {t["tool_name"]: t for t in report["tools"]}
    assert [t["tool_name"] for t in report["tools"]] == ["kubectl-logs", "read-file", "list-processes-in-pod"]
    assert by_name["read-file"]["count"] == 2 and by_name["read-file"]["sessions"] == ["s1", "s2"]
    assert set(by_name["read-file"]["names"]) == {"read-file", "Read_File", "read file"}
    assert by_name["kubectl-logs"]["count"] == 2 and by_name["kubectl-logs"]["session_count"] == 2
    assert by_name["list-processes-in-pod"]["examples"] == [
        {"session_id": "s1", "score_id": by_name["list-processes-in-pod"]["examples"][0]["score_id"], "rationale": "needed list-processes-in-pod"}
    ]
    assert len(api.get("/api/v1/scoring/missing-tools", params={"examples": 1}).json()["tools"][1]["examples"]) == 1

    # Re-scoring s1 under new criteria: by default only each session's latest score counts.
    new_hash = change_criteria(tmp_path)
    stub_judge.answers.append({**VERDICT, "missing_tools": tools("list-files")})
    score(api, "s1", {"force_rescore": True})
    run(api)
    latest = {t["tool_name"]: t["count"] for t in api.get("/api/v1/scoring/missing-tools").json()["tools"]}
    assert latest == {"kubectl-logs": 2, "read-file": 1, "list-files": 1}
    every = {t["tool_name"]: t["count"] for t in api.get("/api/v1/scoring/missing-tools", params={"latest_only": False}).json()["tools"]}
    assert every == {"kubectl-logs": 2, "read-file": 2, "list-processes-in-pod": 1, "list-files": 1}
    only_new = api.get("/api/v1/scoring/missing-tools", params={"criteria_hash": new_hash}).json()
    assert [t["tool_name"] for t in only_new["tools"]] == ["list-files"] and only_new["scores_considered"] == 1
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert api.get("/api/v1/scoring/missing-tools", params={"since": future}).json()["tools"] == []
    assert api.get("/api/v1/scoring/missing-tools", params={"until": future}).json()["scores_considered"] == 3
    assert api.get("/api/v1/scoring/missing-tools", params={"criteria_hash": "XYZ"}).status_code == 422


def test_training_data_curation(api, stub_judge):
    for sid, total in (("good", 92), ("edge", 85), ("meh", 84), ("bad", 30)):
        post(api, make_session(sid))
        stub_judge.answers.append({**VERDICT, "total_score": total})
        scored(api, sid)
    page = api.get("/api/v1/scoring/training-data").json()
    assert page["min_score"] == 85 and page["total"] == 2
    assert [(s["session_id"], s["total_score"]) for s in page["sessions"]] == [("good", 92), ("edge", 85)]
    assert page["sessions"][0]["score_breakdown"] == VERDICT["score_breakdown"]
    assert api.get("/api/v1/scoring/training-data", params={"min_score": 30}).json()["total"] == 4
    export = api.get("/api/v1/scoring/training-data", params={"format": "jsonl", "min_score": 84})
    assert export.status_code == 200 and export.headers["content-type"].startswith("application/x-ndjson")
    lines = list(iter_lines(export.text))
    assert [line["session_id"] for line in lines] == ["good", "edge", "meh"]
    assert lines[0]["session"]["session_id"] == "good" and lines[0]["session"]["conversation"]
    assert api.get("/api/v1/scoring/training-data", params={"min_score": 101}).status_code == 422


def test_rescore_a_set_as_one_batch(api, stub_judge, tmp_path):
    for sid in ("a", "b", "c"):
        post(api, make_session(sid))
    post(api, make_session("running", status="in_progress"))
    scored(api, "a")
    r = api.post("/api/v1/scoring/sessions/rescore", json={"select": "unscored"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["selected"] == 2 and sorted(body["session_ids"]) == ["b", "c"] and body["status"] == "planning"
    assert r.headers["Location"] == f"/api/v1/batches/{body['batch_id']}" and [str(b) for b in api.planned] == [body["batch_id"]]
    in_flight = api.post("/api/v1/scoring/sessions/rescore", json={"select": "unscored"}).json()
    assert in_flight["selected"] == 0 and in_flight["batch_id"] is None  # b and c have scores now (pending)
    run_batches(api)
    batch = api.get(f"/api/v1/batches/{body['batch_id']}").json()
    assert batch["status"] == "completed" and batch["progress"]["completed"] == 2
    assert api.get("/api/v1/scoring/sessions/b/score").json()["status"] == "completed"

    nothing = api.post("/api/v1/scoring/sessions/rescore", json={"select": "stale"})
    assert nothing.status_code == 200 and nothing.json()["selected"] == 0
    new_hash = change_criteria(tmp_path)
    stale = api.post("/api/v1/scoring/sessions/rescore", json={"select": "stale", "limit": 2}, headers={"Idempotency-Key": "k1"})
    assert stale.status_code == 202 and stale.json()["selected"] == 2 and stale.json()["criteria_hash"] == new_hash
    replay = api.post("/api/v1/scoring/sessions/rescore", json={"select": "stale", "limit": 2}, headers={"Idempotency-Key": "k1"})
    assert replay.status_code == 200 and replay.json()["replayed"] and replay.json()["batch_id"] == stale.json()["batch_id"]
    run_batches(api)
    fresh = [api.get(f"/api/v1/scoring/sessions/{sid}/score").json()["is_current_criteria"] for sid in ("a", "b", "c")]
    assert sorted(fresh) == [False, True, True]
    assert api.post("/api/v1/scoring/sessions/rescore", json={"select": "everything"}).status_code == 422


def test_disabled_scoring_takes_no_new_work_but_scores_stay_readable(api, monkeypatch):
    post(api, make_session("s1"))
    scored(api, "s1")
    monkeypatch.setenv("SCORING_ENABLED", "false")
    with transaction() as session:
        register_suite(session, load_suite(REPO / "config", "alert_session"))
    r = score(api, "s1", {"force_rescore": True})
    assert r.status_code == 409 and "disabled" in r.json()["message"]
    assert score(api, "s1").status_code == 200  # the existing score is still returned
    assert api.get("/api/v1/scoring/sessions/s1/score").status_code == 200
    assert api.post("/api/v1/scoring/sessions/rescore", json={"select": "stale"}).status_code == 409


# --- the history service ----------------------------------------------------------------------------------


@pytest.fixture
def history(monkeypatch):
    from assay.scoring.sessions import history as history_module

    with FakeHistory() as fake:
        monkeypatch.setattr(history_module, "configured_base_url", lambda: fake.base_url)
        monkeypatch.setattr(history_module, "configured_timeout", lambda: 1.0)
        yield fake


def test_a_session_not_stored_is_fetched_from_the_history_service(api, history):
    history.put(make_session("h1"))
    r = score(api, "h1")
    assert r.status_code == 202 and history.calls == ["h1"]
    run(api)
    assert score(api, "h1").status_code == 200 and history.calls == ["h1"]  # stored now: not fetched again
    assert api.get("/api/v1/sessions/h1").json()["session"]["session_id"] == "h1"
    history.put(make_session("h2", status="in_progress"))
    assert score(api, "h2").status_code == 400  # fetched and stored, but not completed


@pytest.mark.parametrize(
    ("failure", "status", "error"),
    [(None, 404, "not_found"), ("error", 502, "history_service_error"), ("not_json", 502, "history_service_error"),
     ("invalid", 502, "history_service_error"), ("slow", 504, "history_service_timeout")],
)
def test_history_service_errors_map_to_clear_api_errors(api, history, failure, status, error):
    if failure is not None:
        history.put(make_session("h1"))
        history.fail(failure, delay=3.0)
    r = score(api, "h1")
    assert r.status_code == status and r.json()["error"] == error, r.text
    assert "history service" in r.json()["message"]
    assert api.get("/api/v1/sessions/h1").status_code == 404  # nothing stored


def test_without_a_history_service_an_unknown_session_is_404(api):
    r = score(api, "h1")
    assert r.status_code == 404 and "no history service is configured" in r.json()["message"]


def test_control_characters_in_a_session_id_are_refused(api):
    assert score(api, "bad%00id").status_code == 422
    assert api.get("/api/v1/scoring/sessions/bad%01id/score").status_code == 422
