"""The review queue through the API: list a suite's queue, read an entry, record a verdict as the key's principal."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Label, Score, SuiteRecord
from tests.conftest import API_KEY_NAME
from tests.dashboard.support import post_sign_in
from tests.scoring.test_pipeline import land_all, make_batch, plan_all

REVIEWER = f"key:{API_KEY_NAME}"  # the run's key, typed as a principal


def _queued(n: int = 2) -> list[uuid.UUID]:
    """n kql scores, each picked by the random share (1.0) with a judge answer that needed a repair."""
    with transaction() as s:
        record = s.get(SuiteRecord, "kql")
        record.options = {**record.options, "review": {"random_share": 1.0, "repaired": True}}
    batch_id, score_ids = make_batch(n)
    land_all(
        plan_all(batch_id),
        lambda ref: ComponentResult.ok(0.6, {"reasoning": "close, one filter off", "repaired": True})
        if ref.component == "llm_grading"
        else ComponentResult.ok(1.0),
    )
    return score_ids


def test_the_queue_lists_open_entries_with_reasons_paged(api_client):
    score_ids = _queued(3)
    page = api_client.get("/api/v1/suites/kql/review-queue", params={"limit": 2})
    assert page.status_code == 200, page.text
    body = page.json()
    assert body["total"] == 3 and len(body["entries"]) == 2 and body["counts"] == {"open": 3, "reviewed": 0, "closed": 0}
    entry = body["entries"][0]
    assert entry["score_id"] in {str(s) for s in score_ids}
    assert [r["rule"] for r in entry["reasons"]] == ["repaired", "random"]
    assert entry["reasons"][0]["components"] == ["llm_grading"]
    assert entry["machine"] == {"total": 0.9, "passed": True}  # 0.25 * 0.6 + 0.75
    rest = api_client.get("/api/v1/suites/kql/review-queue", params={"limit": 2, "offset": 2}).json()
    assert len(rest["entries"]) == 1
    assert api_client.get("/api/v1/suites/kql/review-queue", params={"status": "reviewed"}).json()["total"] == 0


def test_bad_queue_parameters_are_422_and_an_unknown_suite_404(api_client):
    for params in ({"limit": 0}, {"limit": 501}, {"offset": -1}, {"status": "pending"}):
        assert api_client.get("/api/v1/suites/kql/review-queue", params=params).status_code == 422
    assert api_client.get("/api/v1/suites/nope/review-queue").status_code == 404
    assert api_client.get("/api/v1/suites/bad name!/review-queue").status_code == 422


def test_an_entry_shows_the_item_and_the_machine_score_with_its_reasoning(api_client):
    _queued(1)
    entry_id = api_client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    detail = api_client.get(f"/api/v1/review-queue/{entry_id}")
    assert detail.status_code == 200
    body = detail.json()
    assert body["item"]["kind"] == "kql" and body["item"]["payload"]
    assert body["score"]["components"]["llm_grading"]["details"]["reasoning"] == "close, one filter off"
    assert body["reviews"] == []
    assert api_client.get(f"/api/v1/review-queue/{uuid.uuid4()}").status_code == 404
    assert api_client.get("/api/v1/review-queue/not-a-uuid").status_code == 422


def test_recording_a_review_uses_the_key_principal_and_keeps_the_machine_score(api_client):
    (score_id,) = _queued(1)
    entry_id = api_client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    made = api_client.post(
        f"/api/v1/review-queue/{entry_id}/review", json={"passed": False, "score": 0.3, "comment": "filters on the wrong column"}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["reviewer"] == REVIEWER
    assert (body["passed"], body["score"], body["comment"], body["entry_status"]) == (False, 0.3, "filters on the wrong column", "reviewed")
    assert body["created_at"]
    with transaction() as s:
        score = s.get(Score, score_id)
        assert (score.total, score.passed) == (0.9, True)
        label = s.scalars(select(Label)).one()
        assert (label.annotator, label.passed, label.score, label.source) == (REVIEWER, False, 0.3, "review")
    queue = api_client.get("/api/v1/suites/kql/review-queue").json()
    assert queue["total"] == 0 and queue["counts"]["reviewed"] == 1
    detail = api_client.get(f"/api/v1/review-queue/{entry_id}").json()
    assert detail["status"] == "reviewed" and [r["reviewer"] for r in detail["reviews"]] == [REVIEWER]


def test_bad_review_bodies_are_refused_with_the_reason(api_client):
    _queued(1)
    entry_id = api_client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    url = f"/api/v1/review-queue/{entry_id}/review"
    for body in ({}, {"passed": "maybe"}, {"passed": True, "score": 1.5}, {"passed": True, "score": -0.1},
                 {"passed": True, "extra": 1}, {"passed": True, "comment": "x" * 10_001}):
        assert api_client.post(url, json=body).status_code == 422, body
    nan = api_client.post(url, content=b'{"passed": true, "score": NaN}', headers={"Content-Type": "application/json"})
    assert nan.status_code == 422
    assert api_client.post(f"/api/v1/review-queue/{uuid.uuid4()}/review", json={"passed": True}).status_code == 404


def test_a_cookie_session_post_without_csrf_is_refused(api_client):
    """A browser (signed-in cookie, no bearer key) must send the page's CSRF token or a same-origin Origin."""
    from fastapi.testclient import TestClient

    from tests.api.test_security_auth import ORIGIN

    _queued(1)
    entry_id = api_client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    with TestClient(api_client.app, base_url=ORIGIN, follow_redirects=False) as browser:
        signed = post_sign_in(browser)
        assert signed.status_code == 303 and browser.cookies.get("assay_session")
        refused = browser.post(f"/api/v1/review-queue/{entry_id}/review", json={"passed": True})
        assert refused.status_code == 403
        ok = browser.post(f"/api/v1/review-queue/{entry_id}/review", json={"passed": True}, headers={"Origin": ORIGIN})
        assert ok.status_code == 201 and ok.json()["reviewer"] == REVIEWER  # a session opened with a key is that key


def test_prometheus_gauge_counts_open_entries_per_suite(api_client):
    _queued(2)
    text = api_client.get("/metrics").text
    assert 'assay_review_queue_open{suite="kql"} 2.0' in text
    assert 'assay_review_queue_open{suite="kql_strict"} 0.0' in text  # a suite with none open reads 0
    assert 'assay_metrics_source_up{source="store"} 1.0' in text
    entry_id = api_client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    assert api_client.post(f"/api/v1/review-queue/{entry_id}/review", json={"passed": True}).status_code == 201
    assert 'assay_review_queue_open{suite="kql"} 1.0' in api_client.get("/metrics").text


def test_every_export_carries_the_human_verdict_beside_the_machine_one(api_client):
    import csv
    import io
    import json

    from openpyxl import load_workbook

    (reviewed, unreviewed) = _queued(2)
    with transaction() as s:
        batch_id = s.get(Score, reviewed).batch_id
    entries = {e["score_id"]: e["entry_id"] for e in api_client.get("/api/v1/suites/kql/review-queue").json()["entries"]}
    made = api_client.post(f"/api/v1/review-queue/{entries[str(reviewed)]}/review", json={"passed": False, "score": 0.25, "comment": "=no"})
    assert made.status_code == 201

    def check(row, score_id, get):
        if score_id == str(reviewed):
            assert get(row, "human_reviewer") == REVIEWER and get(row, "human_passed") in (False, "False")
            assert get(row, "human_score") in (0.25, "0.25") and get(row, "human_labels") in (1, "1")
            assert get(row, "human_majority") == "fail"
        else:
            assert get(row, "human_reviewer") in (None, "") and get(row, "human_labels") in (0, "0")

    report = api_client.get(f"/api/v1/batches/{batch_id}/report.json").json()
    assert report["columns"][-7:] == ["human_reviewer", "human_passed", "human_score", "human_comment",
                                      "human_reviewed_at", "human_labels", "human_majority"]
    assert report["summary"]["pass_rate"] == 1.0  # machine verdicts only
    for row in report["rows"]:
        check(row, row["Score ID"], lambda r, k: r[k])

    rows = list(csv.DictReader(io.StringIO(api_client.get(f"/api/v1/batches/{batch_id}/report.csv").text)))
    for row in rows:
        check(row, row["Score ID"], lambda r, k: r[k])
    assert next(r for r in rows if r["Score ID"] == str(reviewed))["human_comment"] == "'=no"  # the formula guard

    book = load_workbook(io.BytesIO(api_client.get(f"/api/v1/batches/{batch_id}/report.xlsx").content), read_only=True)
    header, *cells = [[c.value for c in row] for row in book["Results"].iter_rows()]
    for values in cells:
        values = [*values, *[None] * (len(header) - len(values))]  # read-only mode drops trailing empty cells
        row = dict(zip(header, values, strict=True))
        check(row, row["Score ID"], lambda r, k: r[k])

    exported = list(csv.DictReader(io.StringIO(api_client.get(f"/api/v1/batches/{batch_id}/results?format=csv").text)))
    assert len(exported) == 2 and all("human_passed" in r for r in exported)
    for row, score_id in zip(exported, (reviewed, unreviewed), strict=True):  # position order; kql's rows name no id
        check(row, str(score_id), lambda r, k: r[k])
    lines = [json.loads(line) for line in api_client.get(f"/api/v1/batches/{batch_id}/results?format=jsonl").text.splitlines()]
    for line in lines:
        check(line["human"], line["score_id"], lambda r, k: r[k])


API_SUITE = """
name: ruled_api_suite
kind: generic
threshold: 0.5
components:
  exact: {weight: 1.0, metric: exact_match, version: 1}
"""


def test_an_api_suite_changing_only_its_review_rules_keeps_its_criteria_hash(api_client):
    headers = {"Content-Type": "application/yaml"}
    first = api_client.post("/api/v1/suites", content=API_SUITE, headers=headers)
    assert first.status_code in (200, 201), first.text
    ruled = api_client.post("/api/v1/suites", content=API_SUITE + "review: {near_threshold: 0.1, random_share: 0.5}\n", headers=headers)
    assert ruled.status_code in (200, 201), ruled.text
    old, new = first.json()["version"], ruled.json()["version"]
    assert ruled.json()["created"] and new["version"] == old["version"] + 1  # a new version ...
    assert new["criteria_hash"] == old["criteria_hash"]  # ... under the same criteria: nothing restales
    with transaction() as s:
        assert s.get(SuiteRecord, "ruled_api_suite").options["review"]["random_share"] == 0.5
    bad = api_client.post(
        "/api/v1/suites",
        content=API_SUITE + "review: {disagreement: [{components: [exact, nope], more_than: 0.2}]}\n",
        headers=headers,
    )
    assert bad.status_code == 422 and "not components of this suite" in bad.text
