"""The compare page in a real browser (Debian's Chromium through Playwright) against a live API and a
live worker: a generic suite of deterministic metrics scores two uploads of the same questions; a
person signs in, opens the first batch, follows "Compare with another batch", picks the second,
reads the paired report (wins / ties / losses, McNemar, the flips, "no noise floor measured") and
downloads the CSV of every pair."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import API_KEY, wait_for, worker_env
from tests.dashboard.support import api_process
from tests.dashboard.test_browser import shot, sign_in

SUITE = """
name: compared_answers
kind: generic
threshold: 0.9
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
"""
FIRST = [
    {"id": "q1", "input": "Capital of France?", "output": "Paris", "expected": "Paris"},  # 1.0 pass
    {"id": "q2", "input": "2 + 2?", "output": "5", "expected": "4"},  # 0.0 fail
    {"id": "q3", "input": "Sky colour?", "output": "blue", "expected": "blue"},  # 1.0 pass
]
SECOND = [
    {"id": "q1", "input": "Capital of France?", "output": "Paris", "expected": "Paris"},  # tie
    {"id": "q2", "input": "2 + 2?", "output": "4", "expected": "4"},  # +1, fail→pass
    {"id": "q3", "input": "Sky colour?", "output": "blu", "expected": "blue"},  # exact 0, close 6/7: pass→fail
    {"id": "q4", "input": "New?", "output": "yes", "expected": "yes"},  # only in the second batch
]


@pytest.fixture
def live_api(clean_db, live_worker_factory, tmp_path):
    live_worker_factory(concurrency=2)
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


def _upload(api: httpx.Client, items: list[dict]) -> str:
    up = api.post(
        "/api/v1/batches?suite=compared_answers",
        content="".join(json.dumps(item) + "\n" for item in items),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert up.status_code == 202, up.text
    batch_id = up.json()["batch_id"]
    wait_for(lambda: api.get(f"/api/v1/batches/{batch_id}").json()["status"] == "completed", 120, message="batch done")
    return batch_id


def test_open_a_batch_compare_it_with_another_and_download_every_pair(chromium, live_api):
    from playwright.sync_api import expect

    api = httpx.Client(base_url=live_api, headers={"Authorization": f"Bearer {API_KEY}"}, verify=False, timeout=30)
    made = api.post("/api/v1/suites", content=SUITE, headers={"Content-Type": "application/yaml"})
    assert made.status_code in (200, 201), made.text
    first, second = _upload(api, FIRST), _upload(api, SECOND)

    page = chromium.new_page()
    sign_in(page, live_api, f"/dashboard/batches/{first}")
    page.click("#compare-with")
    page.wait_for_url(f"{live_api}/dashboard/compare?a={first}")
    candidates = page.locator("#compare-candidates a")
    expect(candidates).to_have_count(1)
    shot(page, "compare-picker")
    candidates.first.click()
    page.wait_for_url(re.compile(rf".*/dashboard/compare\?a={first}&b={second}$"))

    expect(page.locator('[data-field="paired"]')).to_have_text("3")
    expect(page.locator('[data-side="b"] [data-field="only_here"]')).to_have_text("1")
    expect(page.locator('[data-field="tally"]')).to_have_text("1 / 1 / 1")
    expect(page.locator('[data-field="mcnemar"]')).to_have_text("1 / 1 · p = 1")
    total = page.locator('#compare-differences tr[data-row="total"]')
    expect(total.locator('[data-field="n"]')).to_have_text("3")
    expect(total.locator('[data-field="mean_a"]')).to_have_text("0.667")
    # (0 + 1 − (1 − 3/7)) / 3 = 0.143
    expect(total.locator('[data-field="difference"]')).to_have_text("+0.143")
    expect(total.locator('[data-field="interval"]')).to_contain_text("[")
    expect(total.locator('[data-field="noise"]')).to_have_text("no noise floor measured")
    flipped = page.locator("#compare-flipped tr[data-external-id]")
    expect(flipped).to_have_count(2)
    assert [flipped.nth(i).get_attribute("data-external-id") for i in range(2)] == ["q2", "q3"]
    expect(flipped.nth(0)).to_contain_text("fail→pass")
    expect(flipped.nth(1)).to_contain_text("pass→fail")
    shot(page, "compare-report")

    with page.expect_download() as info:
        page.click("#compare-csv")
    path = Path(info.value.path())
    rows = list(csv.DictReader(path.open(newline="")))
    assert [(r["external_id"], r["match"]) for r in rows] == [
        ("q1", "paired"), ("q2", "paired"), ("q3", "paired"), ("q4", "only in b"),
    ]
    assert rows[1]["delta"] == "1.0" and rows[1]["flip"] == "fail→pass"

    flipped.nth(0).locator("a").first.click()
    page.wait_for_url(re.compile(r".*/dashboard/items/[0-9a-f-]{36}$"))
