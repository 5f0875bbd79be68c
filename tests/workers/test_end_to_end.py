"""Batches end to end: API → Redis → a live Celery worker (subprocess) → Postgres, judged by the fake."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from assay.scoring.store.db import transaction
from assay.scoring.store.models import ScoreComponent
from tests.conftest import REPO, wait_for

EXAMPLES = REPO / "examples" / "kql_items.jsonl"


@pytest.fixture
def judged_worker(live_worker_factory, fake_judge):
    return live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )


def submit(api_client, body: bytes, suite: str = "kql", **params) -> str:
    r = api_client.post("/api/v1/batches", params={"suite": suite, **params}, content=body)
    assert r.status_code == 202, r.text
    return r.json()["batch_id"]


def wait_finished(api_client, batch_id: str, timeout: float = 90.0) -> dict:
    def finished():
        view = api_client.get(f"/api/v1/batches/{batch_id}").json()
        return view if view["status"] not in ("planning", "running") else None

    return wait_for(finished, timeout=timeout, message=f"batch {batch_id} to finish")


def all_results(api_client, batch_id: str, **params) -> list[dict]:
    r = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_batch_end_to_end_with_judge(api_client, judged_worker, fake_judge):
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    view = wait_finished(api_client, batch_id)
    assert view["status"] == "completed"
    assert view["progress"]["done"] == 4 and view["progress"]["completed"] == 4
    results = {r["position"]: r for r in all_results(api_client, batch_id)}
    assert len(results) == 4
    for r in results.values():
        assert r["status"] == "completed" and r["partial"] is False
        comps = r["components"]
        assert set(comps) == {"schema_match", "semantic_similarity", "results_match", "llm_grading"}
        assert all(c["status"] == "ok" for c in comps.values())
        assert r["total_score"] == pytest.approx(sum(c["score"] * c["weight"] for c in comps.values()))
        assert r["passed"] == (r["total_score"] >= 0.9 and r["error_message"] is None)
        assert r["usage"]["input_tokens"] > 0 and r["cost_usd"] > 0
        assert "reasoning" in comps["llm_grading"]["details"]
    assert results[1]["components"]["schema_match"]["score"] == 1.0
    assert results[3]["components"]["schema_match"]["score"] == 0.5  # design scenario 3: 'level' missing
    assert results[4]["passed"] is False  # did not execute: never passes, whatever the total
    # Exactly one judge call per item, none repeated.
    calls = fake_judge.calls()
    assert calls["total"] == 4 and set(calls["counts"].values()) == {1}
    assert view["summary"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in results.values()))


def test_without_api_key_the_judge_is_skipped_and_scores_are_partial(api_client, live_worker_factory):
    live_worker_factory()
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    view = wait_finished(api_client, batch_id)
    assert view["progress"]["partial"] == 4
    for r in all_results(api_client, batch_id):
        assert r["partial"] is True and r["renormalized"]["skipped"] == ["llm_grading"]
        judge = r["components"]["llm_grading"]
        assert judge["status"] == "skipped" and judge["score"] is None and "API key" in judge["reason"]
        others = [c for n, c in r["components"].items() if n != "llm_grading"]
        assert r["total_score"] == pytest.approx(sum(c["score"] * c["weight"] for c in others) / 0.75)


def test_results_filters_and_exports(api_client, judged_worker):
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    wait_finished(api_client, batch_id)
    everything = all_results(api_client, batch_id)
    passed = all_results(api_client, batch_id, status="passed")
    failed = all_results(api_client, batch_id, status="failed")
    assert len(passed) + len(failed) == len(everything) == 4
    assert all(r["passed"] for r in passed) and not any(r["passed"] for r in failed)
    page = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"limit": 2, "offset": 2}).json()
    assert page["total"] == 4 and [r["position"] for r in page["results"]] == [3, 4]
    jsonl = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"format": "jsonl"})
    assert jsonl.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in jsonl.text.splitlines()]
    assert [line["position"] for line in lines] == [1, 2, 3, 4]
    assert lines[0]["report"]["Score Status"] in ("PASS", "FAIL")
    import csv
    import io

    csv_text = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"format": "csv"}).text
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert len(rows) == 4
    design_columns = ["Total Score", "Score Status", "Schema Match Score", "Semantic Similarity Score",
                      "Results Match Score", "LLM Grading Score", "LLM Reasoning"]
    assert list(rows[0])[:7] == design_columns
    assert {r["Score Status"] for r in rows} <= {"PASS", "FAIL"}
    assert rows[0]["Prompt"] == "Count traces by level in the last hour"
    item = api_client.get(f"/api/v1/items/{everything[0]['item_id']}").json()
    assert item["external_id"] == "perfect-match" and len(item["scores"]) == 1
    assert item["scores"][0]["is_current_criteria"] is True


def test_malformed_judge_answers_fail_then_retry_failed_completes(api_client, judged_worker, fake_judge):
    fake_judge.configure(default_kind="malformed")
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    view = wait_finished(api_client, batch_id)
    assert view["progress"]["errored"] == 4
    for r in all_results(api_client, batch_id, status="errored"):
        assert r["status"] == "failed" and "llm_grading" in r["error_message"]
        assert r["raw_judge_output"]  # the bad answer is kept
    assert fake_judge.calls()["total"] == 8  # one call and one repair per item
    with transaction() as s:
        metric_attempts = {c.attempts for c in s.query(ScoreComponent).filter(ScoreComponent.component != "llm_grading")}
    fake_judge.configure(default_kind="ok")
    r = api_client.post(f"/api/v1/batches/{batch_id}/retry-failed")
    assert r.status_code == 200 and r.json()["status"] == "running"
    view = wait_finished(api_client, batch_id)
    assert view["status"] == "completed" and view["progress"]["errored"] == 0 and view["progress"]["completed"] == 4
    assert fake_judge.calls()["total"] == 12  # only the failed judge components were sent again
    with transaction() as s:  # landed metric components were kept, not recomputed
        assert {c.attempts for c in s.query(ScoreComponent).filter(ScoreComponent.component != "llm_grading")} == metric_attempts


def test_cancel_keeps_finished_scores_and_drops_queued_work(api_client, live_worker_factory, fake_judge):
    fake_judge.configure(latency=0.5)
    live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url}, concurrency=2
    )
    examples = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    copies = [{**item, "id": f"{item['id']}-{n}"} for n in range(10) for item in examples]  # ids unique in a batch
    batch_id = submit(api_client, "".join(json.dumps(item) + "\n" for item in copies).encode())
    wait_for(
        lambda: api_client.get(f"/api/v1/batches/{batch_id}").json()["progress"]["completed"] >= 2,
        timeout=60,
        message="a few scores to land",
    )
    r = api_client.post(f"/api/v1/batches/{batch_id}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    progress = r.json()["progress"]
    assert progress["cancelled"] > 0 and progress["completed"] >= 2
    assert progress["completed"] + progress["errored"] + progress["cancelled"] + progress["in_progress"] + progress["pending"] == 40
    calls_at_cancel = fake_judge.calls()["total"]
    import time

    time.sleep(3)
    # Work in flight at the cancel may land; nothing queued is sent after it. In flight: at most the
    # worker's 4 call threads (ASSAY_JUDGE_CONCURRENCY), as a part claimed just before the cancel is
    # sent right after it; the rest of the batch's 40 items never is.
    assert fake_judge.calls()["total"] <= calls_at_cancel + 4
    after = api_client.get(f"/api/v1/batches/{batch_id}").json()
    assert after["status"] == "cancelled" and after["progress"]["completed"] >= progress["completed"]
    assert api_client.post(f"/api/v1/batches/{batch_id}/cancel").status_code == 409


def test_delete_removes_batch_items_and_scores(api_client, judged_worker):
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    wait_finished(api_client, batch_id)
    item_id = all_results(api_client, batch_id)[0]["item_id"]
    assert api_client.delete(f"/api/v1/batches/{batch_id}").status_code == 204
    assert api_client.get(f"/api/v1/batches/{batch_id}").status_code == 404
    assert api_client.get(f"/api/v1/items/{item_id}").status_code == 404
    assert api_client.delete(f"/api/v1/batches/{batch_id}").status_code == 404


def test_embedded_run_gives_the_same_scores_as_the_distributed_run(api_client, judged_worker, fake_judge, tmp_path):
    batch_id = submit(api_client, EXAMPLES.read_bytes())
    wait_finished(api_client, batch_id)
    distributed = {r["position"]: r for r in all_results(api_client, batch_id)}
    out = tmp_path / "embedded.jsonl"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("ASSAY_") or k == "ASSAY_CONFIG_DIR"
    } | {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(EXAMPLES), "--suite", "kql", "--out", str(out), "--db", str(tmp_path / "e.db")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    embedded = {r["position"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(embedded) == set(distributed)
    for pos, d in distributed.items():
        e = embedded[pos]
        assert e["criteria_hash"] == d["criteria_hash"]
        assert e["total_score"] == pytest.approx(d["total_score"]), pos
        assert e["passed"] == d["passed"]
        assert {n: c["score"] for n, c in e["components"].items()} == pytest.approx(
            {n: c["score"] for n, c in d["components"].items()}
        )
        assert any(line.startswith("Score: ") for line in e["live"])
    assert "passed" in proc.stdout and "results written" in proc.stderr


def test_an_item_whose_stored_payload_no_longer_validates_fails_its_components_once(
    api_client, live_worker_factory, fake_judge
):
    # Submitted before any worker runs, then one stored payload is made unreadable (as a stricter item
    # model would find an old row): its components fail with the reason at their first claim, instead
    # of being retried until their attempts run out; the other items are scored as usual.
    from sqlalchemy import select, update

    from assay.scoring.store.models import Item, Score

    batch_id = submit(api_client, EXAMPLES.read_bytes())
    with transaction() as s:
        item_id = s.scalar(select(Score.item_id).where(Score.batch_id == batch_id, Score.position == 2))
        s.execute(update(Item).where(Item.id == item_id).values(payload={"not": "a kql item"}))
    live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )
    view = wait_finished(api_client, batch_id)
    assert view["status"] == "completed"
    assert view["progress"]["completed"] == 3 and view["progress"]["errored"] == 1
    broken = {r["position"]: r for r in all_results(api_client, batch_id)}[2]
    assert broken["status"] == "failed"
    for comp in broken["components"].values():
        assert comp["status"] == "failed" and "the stored work cannot be read" in comp["reason"]
    with transaction() as s:
        attempts = s.scalars(
            select(ScoreComponent.attempts).join(Score, Score.id == ScoreComponent.score_id).where(
                Score.batch_id == batch_id, Score.position == 2
            )
        ).all()
    assert attempts == [1, 1, 1, 1]
    assert fake_judge.calls()["total"] == 3  # never judged
