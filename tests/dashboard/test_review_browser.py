"""The review queue in a real browser (Debian's Chromium through Playwright) against a live API and a
live worker: a suite registered through the API declares review rules, its scores enter the queue when
they finalize; a person signs in, sees the queue length in the navigation, opens the queue, reads why
an entry is there and the machine's reasoning, records a verdict, and sees it beside the machine one on
the item page."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.conftest import API_KEY, API_KEY_NAME, wait_for, worker_env

REVIEWER = f"key:{API_KEY_NAME}"  # a session opened with the run's key is that key's principal
from tests.dashboard.support import api_process
from tests.dashboard.test_browser import shot, sign_in

SUITE = """
name: reviewed_answers
kind: generic
threshold: 0.4
components:
  exact:
    weight: 0.5
    metric: exact_match
    version: 1
    args: {case_sensitive: false}
  close:
    weight: 0.5
    metric: levenshtein_ratio
    version: 1
    args: {reference: {from: expected}, case_sensitive: false}
review:
  disagreement: [{components: [exact, close], more_than: 0.3}]
"""
ITEMS = [
    # exact 0, close ~0.9: the two components disagree by more than 0.3 -> queued
    {"id": "q1", "input": "Capital of France?", "output": "Paris, France", "expected": "Paris France"},
    # both 1.0: no disagreement -> not queued
    {"id": "q2", "input": "2 + 2?", "output": "4", "expected": "4"},
]


@pytest.fixture
def live_api(clean_db, live_worker_factory, tmp_path):
    live_worker_factory(concurrency=2)
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


def test_sign_in_open_the_queue_record_a_verdict_and_see_it_on_the_item_page(chromium, live_api):
    from playwright.sync_api import expect

    api = httpx.Client(base_url=live_api, headers={"Authorization": f"Bearer {API_KEY}"}, verify=False, timeout=30)
    made = api.post("/api/v1/suites", content=SUITE, headers={"Content-Type": "application/yaml"})
    assert made.status_code in (200, 201), made.text
    up = api.post(
        "/api/v1/batches?suite=reviewed_answers",
        content="".join(json.dumps(item) + "\n" for item in ITEMS),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert up.status_code == 202, up.text
    batch_id = up.json()["batch_id"]
    wait_for(lambda: api.get(f"/api/v1/batches/{batch_id}").json()["status"] == "completed", 120, message="batch done")
    queue = api.get("/api/v1/suites/reviewed_answers/review-queue").json()
    assert queue["total"] == 1 and queue["entries"][0]["external_id"] == "q1"

    page = chromium.new_page()
    sign_in(page, live_api)
    nav = page.locator('[data-review-suite="reviewed_answers"]')
    expect(nav).to_have_text(re.compile(r"reviewed_answers\s*1"))
    shot(page, "review-nav")
    nav.click()
    page.wait_for_url(f"{live_api}/dashboard/review-queue/reviewed_answers")
    rows = page.locator("#review-entries tr[data-entry-id]")
    expect(rows).to_have_count(1)
    assert "components disagree by" in rows.first.inner_text()
    shot(page, "review-queue")
    rows.first.locator("a.button").click()
    page.wait_for_url(re.compile(r".*/dashboard/review-entries/[0-9a-f-]{36}$"))
    expect(page.locator('[data-field="machine-verdict"]')).to_contain_text("PASS")
    assert "Paris, France" in page.locator("details.payload").inner_text()
    expect(page.locator("#review-form button[type=submit]")).to_contain_text(REVIEWER)

    page.check('#review-form input[name="verdict"][value="fail"]')
    page.fill('#review-form input[name="score"]', "0.4")
    page.fill('#review-form textarea[name="comment"]', "the comma changes nothing, but the answer adds a country")
    page.click("#review-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/dashboard/review-entries/[0-9a-f-]{36}\?recorded=true$"))
    expect(page.locator("#review-recorded")).to_be_visible()
    expect(page.locator('[data-field="entry-status"]')).to_have_text("reviewed")
    expect(page.locator(f'#human-verdict [data-reviewer="{REVIEWER}"]')).to_contain_text("FAIL")
    expect(page.locator('[data-review-suite="reviewed_answers"]')).to_have_count(0)  # nothing open now
    shot(page, "review-recorded")

    page.click("text=item page")
    page.wait_for_url(re.compile(r".*/dashboard/items/[0-9a-f-]{36}$"))
    card = page.locator(".score-card").first
    expect(card.locator('[data-field="human-verdict"]')).to_contain_text(f"Human: FAIL 40.0% · {REVIEWER}")
    assert "PASS" in card.locator("h2").inner_text()  # the machine verdict beside it, unchanged
    expect(card.locator(".reviews")).to_contain_text("the answer adds a country")
    shot(page, "review-item")
