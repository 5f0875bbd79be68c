"""The pairwise pages in a real browser (Debian's Chromium through Playwright) against a live API and a
live worker judged by the loopback fake, scripted to prefer the output holding a marker: a person signs
in, ticks two batches (the first ticked is A), asks for the estimate (the API's dry run: nothing kept),
starts a run on a slow judge and cancels it, starts another sliced by topic, watches it finish, reads
B's wins / ties / losses, win rate, sign test and inconsistency, the slices, and follows a moved pair
to its item page (both orders' verdicts); and, on a run the budget stopped (judged in this process), a
budget too low refused on the page and a new one that sets the run running again."""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest
import yaml

from tests.conftest import API_KEY, wait_for, worker_env
from tests.dashboard.support import api_process
from tests.dashboard.test_browser import shot, sign_in
from tests.fakes.anthropic_server import FakeAnthropic
from tests.workers.test_rescore_e2e import judge_env

SUITE = "pairwise_browser"
MARKER = "[BEST]"
IDS = [f"q{n}" for n in range(6)]
TOPIC = {i: {"topic": "math" if n < 3 else "prose"} for n, i in enumerate(IDS)}


@pytest.fixture
def fake_judge():
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def live_api(clean_db, live_worker_factory, fake_judge, tmp_path):
    live_worker_factory(judge_env(fake_judge), concurrency=2)
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


def _upload(api: httpx.Client, outputs: dict[str, str]) -> str:
    body = "".join(
        json.dumps({"id": i, "input": f"question {i}", "output": out, "expected": "x", "metadata": TOPIC[i]}) + "\n"
        for i, out in outputs.items()
    )
    r = api.post(f"/api/v1/batches?suite={SUITE}", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    wait_for(lambda: api.get(f"/api/v1/batches/{batch_id}").json()["status"] == "completed", 120, message="batch done")
    return batch_id


def _tick(page, a: str, b: str) -> None:
    from playwright.sync_api import expect

    page.check(f'tr[data-pick-batch="{b}"] input[name="batch"]')
    page.check(f'tr[data-pick-batch="{a}"] input[name="batch"]')
    page.uncheck(f'tr[data-pick-batch="{b}"] input[name="batch"]')
    page.check(f'tr[data-pick-batch="{b}"] input[name="batch"]')  # ticked after a: b is B
    expect(page.locator(f'tr[data-pick-batch="{a}"] [data-field="order"]')).to_have_text("A")
    expect(page.locator(f'tr[data-pick-batch="{b}"] [data-field="order"]')).to_have_text("B")


def test_estimate_start_cancel_and_read_a_pairwise_run(chromium, live_api, fake_judge):
    from playwright.sync_api import expect

    api = httpx.Client(base_url=live_api, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    suite = {
        "name": SUITE,
        "kind": "generic",
        "threshold": 0.5,
        "components": {"exact": {"weight": 1.0, "metric": "exact_match", "version": 1}},
        "pairwise": {"rubric": "Which answer is more helpful?", "max_tokens": 256},
    }
    made = api.post("/api/v1/suites", content=yaml.safe_dump(suite), headers={"Content-Type": "application/yaml"})
    assert made.status_code in (200, 201), made.text
    # B holds the marker on q0-q4, A on q5: B wins 5 and loses 1, math 3 / 0 / 0, prose 2 / 0 / 1.
    a = _upload(api, {i: f"A {i}" + (f" {MARKER}" if i == "q5" else "") for i in IDS})
    b = _upload(api, {i: f"B {i}" + (f" {MARKER}" if i != "q5" else "") for i in IDS})
    fake_judge.configure(pairwise_preference="marker", pairwise_marker=MARKER, latency=10.0)

    page = chromium.new_page()
    sign_in(page, live_api, "/dashboard/pairwise")
    expect(page.locator("#no-runs")).to_be_visible()
    _tick(page, a, b)
    page.click("#pairwise-estimate")
    expect(page.locator('#pairwise-result [data-field="estimate"]')).to_contain_text("12 judge call(s) (0 carried over)")
    expect(page.locator("#pairwise-result")).to_contain_text("6 pair(s) over 6 item(s) (all pairs)")
    shot(page, "pairwise-estimate")
    assert api.get("/api/v1/pairwise").json()["runs"] == []  # the estimate kept nothing

    # A run on a slow judge, cancelled from its page (the request carries the CSRF token).
    page.fill(f'tr[data-pick-batch="{a}"] input[name="label"]', "base")
    page.fill(f'tr[data-pick-batch="{b}"] input[name="label"]', "new")
    page.click("#pairwise-start")
    page.wait_for_url(re.compile(r".*/dashboard/pairwise/[0-9a-f-]{36}$"))
    first_run = page.url.rsplit("/", 1)[1]
    expect(page.locator("#run-status")).to_have_text("running")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#pairwise-cancel")
    expect(page.locator("#pairwise-no-report")).to_have_text("This run ended cancelled without a report.")
    assert api.get(f"/api/v1/pairwise/{first_run}").json()["status"] == "cancelled"

    # Another run, sliced by topic, on a quick judge: the page reloads with the report when it is done.
    fake_judge.configure(latency=0.0)
    page.goto(live_api + "/dashboard/pairwise")
    row = page.locator(f'#pairwise-runs tr[data-run-id="{first_run}"]')
    expect(row.locator('[data-field="systems"]')).to_have_text("base · new")
    expect(row.locator('[data-field="run-status"]')).to_have_text("cancelled")
    _tick(page, a, b)
    page.fill('input[name="by"]', "metadata.topic")
    page.click("#pairwise-start")
    page.wait_for_url(re.compile(r".*/dashboard/pairwise/[0-9a-f-]{36}$"))
    assert page.url.rsplit("/", 1)[1] != first_run
    h2h = page.locator("#pairwise-h2h")
    expect(h2h.locator('[data-field="tally"]')).to_have_text("5 / 0 / 1", timeout=120_000)
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(h2h.locator('[data-field="win_rate"]')).to_contain_text("0.833 [")
    expect(h2h.locator('[data-field="sign_test_p"]')).to_have_text("0.2188")  # 5 of 6 decisive, two-sided
    expect(h2h.locator('[data-field="inconsistency"]')).to_have_text("0 of 6 (0.0%)")
    expect(page.locator('#pairwise-slices tr[data-slice="math"] [data-field="tally"]')).to_have_text("3 / 0 / 0")
    expect(page.locator('#pairwise-slices tr[data-slice="prose"] [data-field="tally"]')).to_have_text("2 / 0 / 1")
    moved = page.locator("#pairwise-moved tr[data-external-id]")
    expect(moved).to_have_count(6)
    assert moved.first.get_attribute("data-external-id") == "q5"  # B's loss first
    shot(page, "pairwise-run")

    moved.first.locator('a[data-link="pair"]').click()
    page.wait_for_url(re.compile(r".*/dashboard/items/[0-9a-f-]{36}$"))
    # A card per run that had the pair: the cancelled one's and the one judged in both orders.
    expect(page.locator('[data-judge="a_first"]')).to_have_count(2)
    for order in ("a_first", "b_first"):
        expect(page.locator(f'[data-judge="{order}"] h4 .pill.status-ok')).to_have_count(1)


@pytest.fixture
def api_only(clean_db, tmp_path):
    """The API alone: the test judges the pairs in this process (no worker)."""
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


def test_resume_a_run_the_budget_stopped_from_its_page(chromium, api_only):
    from playwright.sync_api import expect

    from tests.api.test_pairwise_api import judge, start_run, two_batches
    from tests.scoring.test_pipeline import plan_all

    api = httpx.Client(base_url=api_only, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    a, b = two_batches(api)
    run = start_run(api, a, b, budget_usd=0.015)  # each order costs $0.01: the second pair is stopped
    judge(plan_all(uuid.UUID(run["batch_id"])))

    page = chromium.new_page()
    sign_in(page, api_only, f"/dashboard/pairwise/{run['id']}")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#pairwise-pairs")).to_contain_text("1 pair(s) judged in both orders, 3 incomplete")
    resume = page.locator("#pairwise-resume")
    resume.locator('input[name="budget_usd"]').fill("0.01")
    resume.locator('button[type="submit"]').click()
    expect(page.locator("#run-action-result")).to_contain_text("must exceed what the batch has spent")
    resume.locator('input[name="budget_usd"]').fill("1")
    resume.locator('button[type="submit"]').click()
    expect(page.locator("#run-status")).to_have_text("running")  # the page reloaded
    expect(page.locator("#run-budget")).to_have_text("$1.00")
    expect(page.locator("#pairwise-waiting")).to_be_visible()
    view = api.get(f"/api/v1/pairwise/{run['id']}").json()
    assert (view["status"], view["batch_status"], view["budget_usd"]) == ("running", "running", 1.0)
