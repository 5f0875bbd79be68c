"""The pairwise pages without a browser: runs judged in this process (tests/api/test_pairwise_api.py's
helpers land each order as a judge worker would), then the list, a two-batch run with its slices and
moved pairs linked to their items, a four-batch leaderboard, a run stopped by its budget, a cancelled
run, and the mistakes (unknown run, signed out)."""

from __future__ import annotations

import re
import uuid
from html import unescape

import pytest
from fastapi.testclient import TestClient

from tests.api.test_pairwise_api import SUITE, judge, longer_verdict, start_run, two_batches, upload
from tests.conftest import API_KEY
from tests.dashboard.support import make_app, post_sign_in
from tests.scoring.test_pipeline import plan_all


@pytest.fixture
def api(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.pairwise.start_planner", lambda batch_id: None)
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


@pytest.fixture
def page(api):
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as c:
        assert post_sign_in(c).status_code == 303
        yield c


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _section(html: str, element_id: str) -> str:
    return html.split(f'id="{element_id}"')[1].split("</section>")[0]


def test_a_two_batch_run_its_list_row_report_slices_and_moved_pairs(api, page):
    a, b = two_batches(api)
    run = start_run(api, a, b, by="metadata.topic")
    judge(plan_all(uuid.UUID(run["batch_id"])))

    listing = page.get("/dashboard/pairwise")
    assert listing.status_code == 200, listing.text
    row = listing.text.split(f'data-run-id="{run["id"]}"')[1].split("</tr>")[0]
    text = _text(row)
    assert f"{SUITE}:pairwise" not in text and SUITE in text
    assert "A · B" in text and "completed" in text and run["criteria_hash"][:12] in text
    assert "$0.0800" in text  # 4 pairs × 2 orders × $0.01
    assert "B: 4 / 0 / 0" in text
    assert f'href="/dashboard/pairwise/{run["id"]}"' in row

    r = page.get(f"/dashboard/pairwise/{run['id']}")
    assert r.status_code == 200, r.text
    h2h = _text(_section(r.text, "pairwise-report"))
    assert "4 pair(s) judged in both orders" in h2h
    assert "Wins / ties / losses of B against A 4 / 0 / 0" in h2h
    assert "Win rate of B [95 % CI] 1.000" in h2h
    assert "Sign test p 0.125" in h2h  # 4 of 4 decisive pairs, two-sided
    assert "Position-inconsistent 0 of 4 (0.0%)" in h2h
    slices = _section(r.text, "pairwise-slices")
    assert re.findall(r'data-slice="([^"]+)"', slices) == ["q"]
    moved = _section(r.text, "pairwise-moved")
    assert re.findall(r'data-external-id="([^"]+)"', moved) == ["q0", "q1", "q2", "q3"]
    pair_link = re.search(r'href="/dashboard/items/([0-9a-f-]+)" data-link="pair"', moved).group(1)
    a_link = re.search(r'href="/dashboard/items/([0-9a-f-]+)" data-link="a"', moved).group(1)
    assert "A's item" in moved and "B's item" in moved and "b is better" in moved
    # The pair's item page shows both orders' verdicts; the compared item's page its own output.
    pair_page = page.get(f"/dashboard/items/{pair_link}")
    assert pair_page.status_code == 200 and 'data-judge="a_first"' in pair_page.text and 'data-judge="b_first"' in pair_page.text
    assert "A answers q0" in page.get(f"/dashboard/items/{a_link}").text
    assert 'id="run-actions"' not in r.text  # finished: nothing to cancel or resume
    # The run's batch, linked from its page, is a batch page like any other.
    assert f'href="/dashboard/batches/{run["batch_id"]}"' in r.text
    batch_page = page.get(f"/dashboard/batches/{run['batch_id']}")
    assert batch_page.status_code == 200 and f"{SUITE}:pairwise" in batch_page.text
    assert 'id="pairwise-leaderboard"' not in r.text


def test_four_batches_give_a_leaderboard_in_the_designed_order(api, page):
    two_batches(api)  # registers the suite
    ids = [f"q{n}" for n in range(5)]
    batches = [upload(api, {i: " ".join([f"Sentence about {i}."] * (k + 1)) for i in ids}) for k in range(4)]
    r = api.post("/api/v1/pairwise", json={"suite": SUITE, "batches": batches, "labels": ["one", "two", "three", "four"]})
    assert r.status_code == 202, r.text
    run = r.json()["run"]
    judge(plan_all(uuid.UUID(run["batch_id"])), longer_verdict)

    html = page.get(f"/dashboard/pairwise/{run['id']}").text
    board = _section(html, "pairwise-leaderboard")
    assert re.findall(r'data-system="([^"]+)"', board) == ["four", "three", "two", "one"]
    first = board.split('data-system="four"')[1].split("</tr>")[0]
    assert re.search(r'data-field="rank">1<', first) and re.search(r'data-field="rank_range">1–1<', first)
    assert re.search(r'data-field="strength">\+\d\.\d{3} \[\+\d\.\d{3}, \+\d\.\d{3}\]<', first)
    assert "500 bootstrap resamples of the items" in board
    table = _section(html, "pairwise-report")
    assert len(re.findall(r'data-pair="', table)) == 6  # every two of the four systems
    assert _text(table.split('data-pair="four vs one">')[1].split("</tr>")[0]).startswith("four vs one 5 5 / 0 / 0 1.000")
    assert "1st: four" in _text(page.get("/dashboard/pairwise").text)


def test_a_run_the_budget_stopped_offers_resume_and_a_running_one_cancel(api, page):
    a, b = two_batches(api)
    stopped = start_run(api, a, b, budget_usd=0.015)
    judge(plan_all(uuid.UUID(stopped["batch_id"])))
    html = page.get(f"/dashboard/pairwise/{stopped['id']}").text
    actions = html.split('id="run-actions"')[1].split("</div>")[0]
    assert 'id="pairwise-resume"' in actions and 'id="pairwise-cancel"' not in actions
    assert "The budget stopped this run after $0.0200." in _text(actions)
    assert "1 pair(s) judged in both orders, 3 incomplete" in _text(html)

    running = start_run(api, a, b, labels=["base", "new"])
    html = page.get(f"/dashboard/pairwise/{running['id']}").text
    assert 'id="pairwise-cancel"' in html and 'id="pairwise-resume"' not in html
    assert "data-reload-when-done" in html and 'id="pairwise-waiting"' in html
    assert api.post(f"/api/v1/pairwise/{running['id']}/cancel").status_code == 200
    html = page.get(f"/dashboard/pairwise/{running['id']}").text
    assert "This run ended cancelled without a report." in _text(html) and 'id="run-actions"' not in html


def test_the_form_offers_the_pairwise_suites_and_the_batches_to_compare(api, page):
    html = page.get("/dashboard/pairwise").text
    assert 'id="no-pairwise-suite"' in html and 'id="no-runs"' in html
    a, b = two_batches(api)
    run = start_run(api, a, b)
    html = page.get("/dashboard/pairwise").text
    suites = html.split('<select name="suite" required>')[1].split("</select>")[0]
    assert re.findall(r'<option value="([^"]+)"', suites) == [SUITE]  # shipped suites have no pairwise: section
    picked = re.findall(r'data-pick-batch="([^"]+)"', html)
    assert set(picked) == {a, b} and run["batch_id"] not in picked  # the run's own batch is no system
    assert 'data-endpoint="/api/v1/pairwise"' in html


def test_mistakes(api, page):
    missing = uuid.uuid4()
    r = page.get(f"/dashboard/pairwise/{missing}")
    assert r.status_code == 404 and f"pairwise run {missing}" in r.text
    assert page.get("/dashboard/pairwise/not-a-run").status_code == 422
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as anonymous:
        r = anonymous.get("/dashboard/pairwise")
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/sign-in?next=/dashboard/pairwise"
