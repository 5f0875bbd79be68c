"""POST /api/score-query (the KQL scoring design): request and response shapes, waiting, polling, model choice.

Most tests run the score's components in this process (the judge skipped, as without an API key);
the last ones score through a live Celery worker judged by the loopback fake.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from sqlalchemy import select

from assay.scoring.kql import offline
from assay.scoring.kql.execute import execute_kql
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.landing import land
from assay.scoring.pipeline.scorer import compute, load_work
from assay.scoring.store.db import transaction
from assay.scoring.store.models import CriteriaDefinition, Item, Score, ScoreComponent
from assay.scoring.suites.criteria import current_suite, load_criteria
from tests.conftest import API_KEY, wait_for
from tests.scoring.kql.test_design_scenarios import NOW as TRACES_NOW
from tests.scoring.kql.test_design_scenarios import TABLES as TRACES_TABLES

COMPONENTS = {"schema_match", "semantic_similarity", "results_match", "llm_grading"}
QUERY = "Traces | where timestamp > ago(1h) | summarize count() by level"


@pytest.fixture
def client(clean_db, monkeypatch):
    """The API, with published component refs captured instead of sent."""
    from fastapi.testclient import TestClient

    from assay.api.app import create_app
    from assay.api.routes import score_query

    published: list[Any] = []
    monkeypatch.setattr(score_query, "publish_components", lambda refs: published.extend(refs))
    offline.clear()
    with TestClient(create_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as test_client:
        test_client.published = published  # type: ignore[attr-defined]
        yield test_client
    offline.clear()


def run_published(client) -> None:
    """Compute and land every published component here, as a worker without an API key would."""
    refs, client.published[:] = list(client.published), []
    for ref in refs:
        with transaction() as session:
            assert claim(session, ref, "test", 60).state == "claimed"
        with transaction() as session:
            work = load_work(session, ref)
        result = compute(work, None)
        with transaction() as session:
            land(session, ref, result)


def design_request(generated: str, expected: str, **extra: Any) -> dict[str, Any]:
    """Design 000's request, with the columns and rows each query returns on the inline Traces table."""

    def plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()} for row in rows]

    generated_columns, generated_rows = execute_kql(generated, TRACES_TABLES, TRACES_NOW)
    expected_columns, expected_rows = execute_kql(expected, TRACES_TABLES, TRACES_NOW)
    return {
        "generated_kql": generated,
        "expected_kql": expected,
        "prompt": "How many traces per level in the last hour?",
        "generated_columns": generated_columns,
        "expected_columns": expected_columns,
        "generated_results": plain(generated_rows),
        "expected_results": plain(expected_rows),
        **extra,
    }


def assert_design_shape(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body) >= {"success", "score"}
    score = body["score"]
    assert set(score) >= {"total_score", "is_successful", "threshold", "components"}
    assert set(score["components"]) == COMPONENTS
    for component in score["components"].values():
        assert set(component) >= {"score", "weighted_score", "weight", "details"}
        assert component["weight"] == 0.25
        if component["score"] is not None:
            assert component["weighted_score"] == pytest.approx(component["score"] * 0.25)
    return score


# --- without a worker --------------------------------------------------------------------------------


def test_post_creates_one_score_and_answers_202_with_a_location(client) -> None:
    r = client.post("/api/score-query", json=design_request(QUERY, QUERY))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "pending" and r.headers["location"] == f"/api/score-query/{body['score_id']}"
    assert sorted((ref.component, ref.queue) for ref in client.published) == [
        ("llm_grading", "judge"),
        ("results_match", "metrics"),
        ("schema_match", "metrics"),
        ("semantic_similarity", "metrics"),
    ]
    with transaction() as session:
        score = session.get(Score, uuid.UUID(body["score_id"]))
        assert score.batch_id is None and score.suite_name == "kql" and score.status == "pending"
        assert score.criteria_hash == current_suite(session, "kql").current_criteria_hash
        item = session.get(Item, score.item_id)
        assert item.payload["generated_kql"] == QUERY and item.origin_batch_id is None
        assert session.query(ScoreComponent).filter_by(score_id=score.id).count() == 4
    pending = client.get(body["score_id"] and f"/api/score-query/{body['score_id']}")
    assert pending.status_code == 202 and pending.json() == {"score_id": body["score_id"], "status": "pending"}


def test_get_returns_the_design_shape_once_finished(client) -> None:
    score_id = client.post("/api/score-query", json=design_request(QUERY, QUERY)).json()["score_id"]
    run_published(client)
    r = client.get(f"/api/score-query/{score_id}")
    assert r.status_code == 200, r.text
    body = r.json()
    score = assert_design_shape(body)
    assert body["success"] is True and score["threshold"] == 0.9
    assert {n: c["score"] for n, c in score["components"].items() if n != "llm_grading"} == {
        "schema_match": 1.0,
        "semantic_similarity": 1.0,
        "results_match": 1.0,
    }
    assert score["components"]["llm_grading"]["status"] == "skipped" and score["partial"] is True
    assert score["total_score"] == 1.0 and score["is_successful"] is True


def test_wait_returns_the_finished_score(client, monkeypatch) -> None:
    from assay.api.routes import score_query

    # Run the components as soon as they are published: the request then finds the score finished.
    monkeypatch.setattr(score_query, "publish_components", lambda refs: (client.published.extend(refs), run_published(client)))
    r = client.post("/api/score-query", params={"wait": 10}, json=design_request(QUERY, QUERY))
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True and r.json()["score"]["total_score"] == 1.0


def test_wait_gives_up_with_202_when_the_score_is_not_ready(client) -> None:
    r = client.post("/api/score-query", params={"wait": 0.3}, json=design_request(QUERY, QUERY))
    assert r.status_code == 202 and r.headers["location"].endswith(r.json()["score_id"])


def test_an_expected_query_that_failed_completes_but_cannot_pass(client) -> None:
    """Never the generated query's fault (issue 19): nothing to compare, so no pass, with the blocker."""
    request = design_request(QUERY, QUERY, expected_error="Semantic error: table Traces not found")
    request.update(expected_columns=None, expected_results=None)
    score_id = client.post("/api/score-query", json=request).json()["score_id"]
    run_published(client)
    r = client.get(f"/api/score-query/{score_id}")
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True and body["score"]["is_successful"] is False
    assert body["score"]["components"]["results_match"]["status"] == "skipped"
    assert body["score"]["error_message"].startswith("results_match: no execution evidence: the expected query did not execute")
    assert "table Traces not found" in body["score"]["error_message"]


def test_a_query_that_did_not_execute_completes_but_cannot_pass(client) -> None:
    request = design_request(QUERY, QUERY, generated_error="Failed to resolve table 'Traces'")
    request.update(generated_columns=None, generated_results=None)
    score_id = client.post("/api/score-query", json=request).json()["score_id"]
    run_published(client)
    body = client.get(f"/api/score-query/{score_id}").json()
    assert body["success"] is True and body["score"]["is_successful"] is False
    assert body["score"]["error_message"] == "generated query did not execute: Failed to resolve table 'Traces'"


def test_unknown_and_bad_requests(client) -> None:
    assert client.get(f"/api/score-query/{uuid.uuid4()}").status_code == 404
    request = design_request(QUERY, QUERY)
    assert client.post("/api/score-query", json={k: v for k, v in request.items() if k != "generated_kql"}).status_code == 422
    assert client.post("/api/score-query", json={**request, "unexpected": 1}).status_code == 422
    assert client.post("/api/score-query", params={"wait": 61}, json=request).status_code == 422
    assert client.post("/api/score-query", json={**request, "prompt": "a\u0000b"}).status_code == 422
    assert client.post("/api/score-query", params={"suite": "nope"}, json=request).status_code == 404
    assert client.post("/api/score-query", json=request, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(f"/api/score-query/{uuid.uuid4()}", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.published == []
    with transaction() as session:
        assert session.scalar(select(Score.id)) is None


def test_nan_in_rows_is_refused_not_stored_as_null(client) -> None:
    # JSON has no NaN (Python's parser would take it, and the row would be stored with a null).
    body = json.dumps(design_request(QUERY, QUERY)).replace('"count_": 1}', '"count_": NaN}', 1)
    assert "NaN" in body
    r = client.post("/api/score-query", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["message"] == "NaN, Infinity or a number past the float range is not valid JSON"
    assert client.published == []
    with transaction() as session:
        assert session.scalar(select(Score.id)) is None


def test_the_suite_parameter(client) -> None:
    score_id = client.post("/api/score-query", params={"suite": "kql_strict"}, json=design_request(QUERY, QUERY)).json()["score_id"]
    with transaction() as session:
        score = session.get(Score, uuid.UUID(score_id))
        assert score.suite_name == "kql_strict"
        assert score.criteria_hash == current_suite(session, "kql_strict").current_criteria_hash


def test_model_scores_under_a_criteria_variant(client) -> None:
    request = design_request(QUERY, QUERY)
    with transaction() as session:
        suite_hash = current_suite(session, "kql").current_criteria_hash
        suite_criteria = load_criteria(session, suite_hash)
    assert suite_criteria.judge.model != "claude-opus-5-5"

    first = client.post("/api/score-query", json={**request, "model": "claude-opus-5-5"}).json()["score_id"]
    second = client.post("/api/score-query", json={**request, "model": "claude-opus-5-5"}).json()["score_id"]
    same = client.post("/api/score-query", json={**request, "model": suite_criteria.judge.model}).json()["score_id"]
    with transaction() as session:
        hashes = [session.get(Score, uuid.UUID(s)).criteria_hash for s in (first, second, same)]
        assert hashes[0] == hashes[1] != suite_hash and hashes[2] == suite_hash
        variant = session.get(CriteriaDefinition, hashes[0]).criteria_content
    assert variant["judge"]["model"] == "claude-opus-5-5"
    original = suite_criteria.model_dump(mode="json")
    assert {**variant, "judge": {**variant["judge"], "model": original["judge"]["model"]}} == original

    r = client.post("/api/score-query", json={**request, "model": "gpt-4o-mini"})
    assert r.status_code == 422 and "gpt-4o-mini" in r.json()["message"]


def test_a_dataset_by_name_is_run_offline_and_stored_by_hash(client) -> None:
    rows = [{**row, "timestamp": row["timestamp"].isoformat()} for row in TRACES_TABLES["Traces"]]
    registered = client.post("/api/v1/datasets", json={"name": "traces", "tables": {"Traces": rows}})
    assert registered.status_code == 201, registered.text
    content_hash = registered.json()["content_hash"]
    request = {
        "generated_kql": "Traces | where timestamp > ago(60m) | summarize count() by level",
        "expected_kql": QUERY,
        "prompt": "How many traces per level in the last hour?",
        "dataset": "traces",
        "now": TRACES_NOW.isoformat() + "Z",
    }
    score_id = client.post("/api/score-query", json=request).json()["score_id"]
    with transaction() as session:
        item = session.get(Item, session.get(Score, uuid.UUID(score_id)).item_id)
        assert item.payload["dataset"] == content_hash and item.dataset_hash == content_hash
    run_published(client)
    score = assert_design_shape(client.get(f"/api/score-query/{score_id}").json())
    results = score["components"]["results_match"]
    assert results["score"] == 1.0 and results["details"]["source"] == "offline"
    assert results["details"]["compared_rows"] == 3 and results["details"]["now"].startswith("2024-05-01T12:00:00")

    broken = {**request, "generated_kql": "Traces | where severity == 'high' | count"}
    score_id = client.post("/api/score-query", json=broken).json()["score_id"]
    run_published(client)
    body = client.get(f"/api/score-query/{score_id}").json()
    assert body["success"] is True and body["score"]["is_successful"] is False
    assert body["score"]["error_message"].startswith("generated query did not execute") and "severity" in body["score"]["error_message"]
    assert body["score"]["components"]["schema_match"]["score"] == 0.0

    r = client.post("/api/score-query", json={**request, "dataset": "no-such-dataset"})
    assert r.status_code == 422 and "no-such-dataset" in r.json()["message"]


# --- through a live worker, judged by the fake --------------------------------------------------------


@pytest.fixture
def judged(client, live_worker_factory, fake_judge, monkeypatch):
    from assay.api.publish import publish_components
    from assay.api.routes import score_query

    monkeypatch.setattr(score_query, "publish_components", publish_components)  # really enqueue
    live_worker_factory(
        {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )
    return client


def score_now(client, request: dict[str, Any], **params: Any) -> dict[str, Any]:
    r = client.post("/api/score-query", params={"wait": 45, **params}, json=request)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True, body
    return assert_design_shape(body)


def check_total(score: dict[str, Any]) -> float:
    judge = score["components"]["llm_grading"]
    assert judge["status"] == "ok" and 0.0 <= judge["score"] <= 1.0 and judge["details"]["reasoning"]
    total = sum(c["weighted_score"] for c in score["components"].values())
    assert score["total_score"] == pytest.approx(total)
    assert score["is_successful"] == (total >= 0.9 and score["error_message"] is None)
    return judge["score"]


def test_design_scenario_1_perfect_match(judged) -> None:
    score = score_now(judged, design_request(QUERY, QUERY))
    assert [score["components"][n]["score"] for n in ("schema_match", "semantic_similarity", "results_match")] == [1.0, 1.0, 1.0]
    judge = check_total(score)
    assert score["total_score"] == pytest.approx(0.75 + 0.25 * judge)


def test_design_scenario_2_minor_differences(judged) -> None:
    score = score_now(
        judged,
        design_request(
            "Traces | where timestamp > ago(1h) | project timestamp, level, message",
            "Traces | where timestamp > ago(60m) | project timestamp, level, message",
        ),
    )
    components = score["components"]
    assert components["schema_match"]["score"] == 1.0
    assert components["semantic_similarity"]["score"] == 1.0  # 1h ≡ 60m: the design's 90% was a regex artefact
    assert components["results_match"]["score"] == 1.0 and components["results_match"]["details"]["compared_rows"] == 7
    check_total(score)


def test_design_scenario_3_failed_query(judged) -> None:
    score = score_now(
        judged,
        design_request("AppTraces | where timestamp > ago(1h) | summarize count()", QUERY),
    )
    components = score["components"]
    assert components["schema_match"]["score"] == 0.5
    assert components["schema_match"]["details"]["missing_columns"] == ["level"]
    assert components["semantic_similarity"]["score"] == pytest.approx(0.45)
    assert components["results_match"]["score"] == 0.0
    check_total(score)
    assert score["is_successful"] is False and score["total_score"] <= 0.4875


def test_model_picks_the_judge_and_polling_works(judged, fake_judge) -> None:
    r = judged.post("/api/score-query", json={**design_request(QUERY, QUERY), "model": "claude-opus-5-5"})
    assert r.status_code == 202
    location = r.headers["location"]

    def finished():
        response = judged.get(location)
        return response if response.status_code == 200 else None

    body = wait_for(finished, timeout=60, message="the score to finish").json()
    score = assert_design_shape(body)
    assert score["judge_model"] == "claude-opus-5-5"
    assert score["components"]["llm_grading"]["details"]["model"] == "claude-opus-5-5"
    assert [call["model"] for call in fake_judge.calls()["calls"]] == ["claude-opus-5-5"]


# --- generated requests ------------------------------------------------------------------------------


@pytest.fixture
def score_query_schema(clean_db, monkeypatch):
    from assay.api.app import create_app
    from assay.api.routes import score_query

    monkeypatch.setattr(score_query, "publish_components", lambda refs: None)
    monkeypatch.setattr(score_query, "MAX_WAIT_SECONDS", 0.0)  # nothing is scored: never wait
    return schemathesis.openapi.from_asgi("/openapi.json", create_app())


score_query_api = schemathesis.pytest.from_fixture("score_query_schema")


@score_query_api.include(path_regex="^/api/score-query").parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_generated_requests_never_get_a_server_error(case) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {API_KEY}"}, checks=[not_a_server_error])


def test_a_nul_character_is_a_clear_422(client) -> None:
    r = client.post("/api/score-query", json={"generated_kql": "T", "expected_kql": "T", "prompt": "a\x00b"})
    assert r.status_code == 422 and "NUL" in r.json()["message"]
