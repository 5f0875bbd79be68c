"""Dataset-backed KQL items end to end: register the shipped ``storm`` dataset through the API, upload
``examples/kql_dataset_items.jsonl``, and let a live worker (judged by the fake) run both queries offline."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from assay.scoring.kql.report import kql_live_lines, kql_report_row
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score
from tests.conftest import REPO
from tests.workers.test_end_to_end import all_results, submit, wait_finished

EXAMPLES = REPO / "examples" / "kql_dataset_items.jsonl"
DATASETS = REPO / "examples" / "datasets"


@pytest.fixture
def storm(api_client, monkeypatch) -> str:
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "data_dir", DATASETS)
    r = api_client.post("/api/v1/datasets", json={"name": "storm", "path": "storm"})
    assert r.status_code == 201, r.text
    assert set(r.json()["tables"]) == {"StormEvents", "PopulationData"}
    assert r.json()["tables"]["StormEvents"]["rows"] == 300
    return r.json()["content_hash"]


@pytest.fixture
def judged_worker(live_worker_factory, fake_judge):
    return live_worker_factory(
        {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )


def by_id(api_client, batch_id: str) -> dict[str, dict]:
    results = all_results(api_client, batch_id)
    with transaction() as session:
        external = {
            str(s.id): s.item.external_id
            for s in session.scalars(select(Score).where(Score.batch_id == uuid.UUID(batch_id)).options(selectinload(Score.item)))
        }
    return {external[r["score_id"]]: r for r in results}


def scores(result: dict) -> dict[str, float | str]:
    return {n: c["score"] if c["status"] == "ok" else c["status"] for n, c in result["components"].items()}


def test_items_without_a_registered_dataset_are_rejected(api_client) -> None:
    r = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=EXAMPLES.read_bytes())
    assert r.status_code == 422 and "no dataset 'storm'" in r.text


def test_dataset_items_are_scored_offline(api_client, storm, judged_worker, fake_judge) -> None:
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    view = wait_finished(api_client, batch_id, timeout=120)
    assert view["status"] == "completed" and view["progress"]["completed"] == 11 and view["progress"]["errored"] == 0
    results = by_id(api_client, batch_id)

    with transaction() as session:  # ingest replaced the name by the content hash
        payloads = [i.payload for i in session.scalars(select(Item).where(Item.dataset_hash == storm))]
    assert len(payloads) == 11 and {p["dataset"] for p in payloads} == {storm}

    for name in ("storm-perfect-match", "storm-equivalent-rewrite", "storm-in-vs-or", "storm-aggregation-alias"):
        r = results[name]
        assert {n: s for n, s in scores(r).items() if n != "llm_grading"} == {
            "schema_match": 1.0,
            "semantic_similarity": 1.0,
            "results_match": 1.0,
        }, name
        assert r["components"]["results_match"]["details"]["source"] == "offline"
        assert r["components"]["results_match"]["details"]["now"] == "2007-12-31T00:00:00+00:00"
    alias = results["storm-aggregation-alias"]["components"]
    assert alias["schema_match"]["details"]["renamed_columns"] == {"TotalDamage": "sum_DamageProperty"}
    assert alias["results_match"]["details"]["renamed_columns"] == {"TotalDamage": "sum_DamageProperty"}

    # Design 000's recall is fooled by a dropped filter: every expected row is still there.
    dropped = results["storm-dropped-filter"]
    assert scores(dropped)["results_match"] == 1.0 and scores(dropped)["semantic_similarity"] == pytest.approx(0.85)

    assert scores(results["storm-wrong-aggregation"])["results_match"] == pytest.approx(17 / 26)
    assert scores(results["storm-different-take"])["results_match"] == pytest.approx(0.6)

    for name, needle in (("storm-does-not-parse", "could not parse KQL"), ("storm-unknown-column", "Country")):
        r = results[name]
        assert r["status"] == "completed" and r["passed"] is False
        assert r["error_message"].startswith("generated query did not execute") and needle in r["error_message"]
        assert scores(r)["schema_match"] == 0.0 and scores(r)["results_match"] == 0.0
        assert needle in r["components"]["results_match"]["details"]["error"]

    gap = results["storm-engine-gap"]
    assert scores(gap)["schema_match"] == "skipped" and scores(gap)["results_match"] == "skipped"
    assert "cannot be executed offline" in gap["components"]["results_match"]["reason"]
    # An engine gap is not the query's fault, but nothing was compared: no pass without evidence.
    assert gap["partial"] is True and gap["passed"] is False
    assert gap["error_message"].startswith("results_match: no execution evidence: the generated query cannot be executed offline")
    fallback = results["storm-engine-gap-with-results"]
    assert scores(fallback)["results_match"] == 1.0
    assert fallback["components"]["results_match"]["details"]["source"] == "supplied"

    for r in results.values():
        assert r["passed"] == (r["total_score"] >= 0.9 and r["error_message"] is None)
    assert fake_judge.calls()["total"] == 11

    # The report columns, read from the stored scores.
    with transaction() as session:
        stored = session.scalars(
            select(Score)
            .where(Score.batch_id == uuid.UUID(batch_id))
            .options(selectinload(Score.components), selectinload(Score.item))
        ).all()
        rows = {s.item.external_id: kql_report_row(s) for s in stored}
        live = {s.item.external_id: kql_live_lines(s, 0.9) for s in stored}
    unknown = rows["storm-unknown-column"]
    assert unknown["Score Status"] == "FAIL" and "Country" in unknown["Execution Error"]
    assert unknown["Generated Query"] == 'StormEvents | where Country == "US" | count'
    perfect = rows["storm-perfect-match"]
    assert perfect["Schema Match Score"] == 1.0 and perfect["Execution Error"] is None and perfect["LLM Reasoning"]
    assert perfect["Score Status"] == ("PASS" if results["storm-perfect-match"]["passed"] else "FAIL")

    # Design 000's live lines, read from the stored scores.
    query, executed, verdict, parts = live["storm-perfect-match"]
    assert query == "Query: StormEvents | where StartTime > ago(30d) | summarize count() by State"
    assert executed == "Query executed (results: 19)"  # 19 states had a storm in the 30 days before the pinned now
    total = results["storm-perfect-match"]["total_score"]
    assert verdict.startswith(f"Score: {100 * total:.1f}% (") and ("PASS ≥90%" in verdict) is (total >= 0.9)
    assert parts.startswith("Schema: 100% | Semantic: 100% | Results: 100% | LLM: ")
    assert live["storm-unknown-column"][1].startswith("Query failed: ") and "Country" in live["storm-unknown-column"][1]
    assert live["storm-engine-gap"][1].startswith("Query not executed offline: the generated query cannot be executed offline")
    assert live["storm-engine-gap"][2].endswith("(partial)")
    assert live["storm-engine-gap-with-results"][1] == "Query executed (results: 1)"  # the supplied rows


def test_strict_suite_catches_the_dropped_filter(api_client, storm, judged_worker) -> None:
    batch_id = submit(api_client, EXAMPLES.read_bytes(), suite="kql_strict")
    wait_finished(api_client, batch_id, timeout=120)
    results = by_id(api_client, batch_id)
    dropped = results["storm-dropped-filter"]
    assert scores(dropped)["results_match"] == pytest.approx(0.375)
    assert dropped["passed"] is False  # at most 0.25 * (1 + 0.889 + 0.375 + 1) < 0.9
    assert scores(results["storm-equivalent-rewrite"])["results_match"] == 1.0
    assert scores(results["storm-different-take"])["semantic_similarity"] < 1.0
