"""The review queue's dashboard pages without a browser: the queues, a suite's queue with its reasons, an
entry with the machine score's reasoning, the review form (reviewer = the signed-in name, CSRF), the
navigation count, and the human verdict beside the machine one on the item and batch pages."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Label, Score, SuiteRecord
from tests.conftest import API_KEY_NAME
from tests.dashboard.support import make_app, post_sign_in
from tests.scoring.test_pipeline import land_all, make_batch, plan_all

REVIEWER = f"key:{API_KEY_NAME}"  # a session opened with the run's key is that key's principal

ORIGIN = "https://testserver"


@pytest.fixture
def signed_in(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    with TestClient(make_app(), base_url=ORIGIN, follow_redirects=False) as client:
        r = post_sign_in(client)
        assert r.status_code == 303, r.text
        yield client


def _queued(n: int = 2):
    with transaction() as s:
        record = s.get(SuiteRecord, "kql")
        record.options = {**record.options, "review": {"near_threshold": 0.05, "repaired": True}}
    batch_id, score_ids = make_batch(n)
    land_all(
        plan_all(batch_id),
        lambda ref: ComponentResult.ok(0.7, {"reasoning": "joins the wrong table", "repaired": True})
        if ref.component == "llm_grading"
        else ComponentResult.ok(1.0),
    )
    with transaction() as s:
        return batch_id, score_ids, [s.get(Score, sid).item_id for sid in score_ids]


def _entry_ids(page_text: str) -> list[str]:
    return re.findall(r'data-entry-id="([0-9a-f-]{36})"', page_text)


def test_the_navigation_counts_open_entries_per_suite(signed_in):
    page = signed_in.get("/dashboard/")
    assert 'id="nav-review"' in page.text and "data-review-suite" not in page.text
    _queued(2)
    page = signed_in.get("/dashboard/")
    assert re.search(r'data-field="review-open">2<', page.text)
    assert re.search(r'data-review-suite="kql">kql <span class="pill">2</span>', page.text)


def test_the_queues_page_and_a_suite_queue_list_entries_with_reasons(signed_in):
    _queued(2)
    queues = signed_in.get("/dashboard/review")
    assert queues.status_code == 200
    assert 'data-suite="kql"' in queues.text and "within 0.05 of the threshold" in queues.text
    queue = signed_in.get("/dashboard/review-queue/kql")
    assert queue.status_code == 200 and len(_entry_ids(queue.text)) == 2
    assert "total 0.925 within 0.05 of the threshold 0.9" in queue.text
    assert "a judge answer needed a repair: llm_grading" in queue.text
    assert signed_in.get("/dashboard/review-queue/nope").status_code == 404
    assert signed_in.get("/dashboard/review-queue/kql?status=bogus").status_code == 422


def test_pages_need_a_signed_in_viewer(clean_db):
    from tests.dashboard.support import make_app as fresh

    with TestClient(fresh(), base_url=ORIGIN, follow_redirects=False) as anonymous:
        for path in ("/dashboard/review", "/dashboard/review-queue/kql"):
            r = anonymous.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/sign-in")


def test_an_entry_shows_the_item_machine_score_and_reasoning_and_records_a_verdict(signed_in):
    batch_id, score_ids, item_ids = _queued(1)
    (entry_id,) = _entry_ids(signed_in.get("/dashboard/review-queue/kql").text)
    page = signed_in.get(f"/dashboard/review-entries/{entry_id}")
    assert page.status_code == 200
    assert "joins the wrong table" in page.text  # the judge's reasoning
    assert 'data-field="machine-verdict">92.5% PASS' in page.text
    assert 'id="review-form"' in page.text and f"Record verdict as {REVIEWER}" in page.text

    # without a same-origin Origin (or the page's token) the CSRF middleware refuses the form
    refused = signed_in.post(f"/dashboard/review-entries/{entry_id}", data={"verdict": "fail"})
    assert refused.status_code == 403
    done = signed_in.post(
        f"/dashboard/review-entries/{entry_id}",
        data={"verdict": "fail", "score": "0.2", "comment": "wrong table"},
        headers={"Origin": ORIGIN},
    )
    assert done.status_code == 303 and done.headers["location"] == f"/dashboard/review-entries/{entry_id}?recorded=true"
    after = signed_in.get(done.headers["location"])
    assert 'id="review-recorded"' in after.text and f'data-reviewer="{REVIEWER}"' in after.text
    assert 'data-field="entry-status">reviewed' in after.text
    with transaction() as s:
        label = s.scalars(select(Label)).one()
        assert (label.annotator, label.passed, label.score, label.comment) == (REVIEWER, False, 0.2, "wrong table")
        assert s.get(Score, score_ids[0]).passed is True  # the machine verdict is unchanged

    item = signed_in.get(f"/dashboard/items/{item_ids[0]}")
    assert re.search(r"Human: FAIL 20.0% · " + re.escape(REVIEWER), item.text)
    assert "Reviews of this score (1)" in item.text and "wrong table" in item.text
    batch = signed_in.get(f"/dashboard/batches/{batch_id}")
    assert re.search(r"Human: FAIL 20.0% · " + re.escape(REVIEWER), batch.text)
    nav = signed_in.get("/dashboard/")
    assert "data-review-suite" not in nav.text  # nothing open any more


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({}, "Choose pass or fail."),
        ({"verdict": "maybe"}, "Choose pass or fail."),
        ({"verdict": "pass", "score": "lots"}, "is not a number"),
        ({"verdict": "pass", "score": "1.5"}, "outside 0 to 1"),
        ({"verdict": "pass", "score": "nan"}, "outside 0 to 1"),
        ({"verdict": "pass", "comment": "x" * 10_001}, "longer than 10,000 characters"),
    ],
)
def test_a_bad_form_is_shown_again_with_the_reason(signed_in, form, message):
    _queued(1)
    (entry_id,) = _entry_ids(signed_in.get("/dashboard/review-queue/kql").text)
    r = signed_in.post(f"/dashboard/review-entries/{entry_id}", data=form, headers={"Origin": ORIGIN})
    assert r.status_code == 422 and message in r.text and 'id="review-error"' in r.text
    with transaction() as s:
        assert s.scalars(select(Label)).first() is None


def test_an_unknown_entry_is_404(signed_in):
    import uuid

    missing = uuid.uuid4()
    assert signed_in.get(f"/dashboard/review-entries/{missing}").status_code == 404
    r = signed_in.post(f"/dashboard/review-entries/{missing}", data={"verdict": "pass"}, headers={"Origin": ORIGIN})
    assert r.status_code == 404
