"""A jury as a user sees it through the API, the reports and the dashboard: scored in this process
against the loopback Anthropic fake, its three members scripted per model name (one always disagrees).
Each member's verdict, reasoning and cost are shown beside the jury's aggregate; the Juries page and
``GET /api/v1/suites/{name}/jury-agreement`` give the library's alpha."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import krippendorff
import pytest
from fastapi.testclient import TestClient

from tests.conftest import API_KEY
from tests.dashboard.support import judge_runtime, make_app, post_sign_in, score_in_process
from tests.fakes.anthropic_server import FakeAnthropic

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MEMBERS = ["claude-haiku-5-5", "claude-sonnet-5-5", "claude-opus-5-5"]
SUITE = """
name: jury_pages
kind: generic
threshold: 0.5
components:
  exact:
    weight: 0.5
    metric: exact_match
    version: 1
  correctness:
    weight: 0.5
    judge:
      rubric: Is the answer correct?
      max_tokens: 256
      verdict: {type: pass_fail}
      judges:
        - {provider: anthropic, model: claude-haiku-5-5}
        - {provider: anthropic, model: claude-sonnet-5-5}
        - {provider: anthropic, model: claude-opus-5-5, name: opus}
      aggregate: majority
"""
ITEMS = [{"id": f"q{n}", "input": f"{n}+{n}?", "output": str(2 * n), "expected": str(2 * n)} for n in range(3)]


@pytest.fixture
def signed_in(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as client:
        assert post_sign_in(client).status_code == 303
        yield client


def score_jury_batch(client, **fake_config):  # type: ignore[no-untyped-def]
    """The suite's batch of ITEMS scored against the fake (``fake_config``: beside the scripted verdicts):
    its id, its results as the API gives them and the models the fake was asked, one per call."""
    r = client.post("/api/v1/suites", content=SUITE.encode(), headers={**AUTH, "Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    body = "\n".join(json.dumps(i) for i in ITEMS).encode()
    r = client.post("/api/v1/batches?suite=jury_pages", content=body, headers={**AUTH, "Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    with FakeAnthropic() as fake:
        fake.configure(
            model_answers={"claude-haiku-5-5": {"passed": True}, "claude-sonnet-5-5": {"passed": True}, "claude-opus-5-5": {"passed": False}},
            **fake_config,
        )
        score_in_process(batch_id, judge_runtime(fake.base_url))
        models = [c["model"] for c in fake.calls()["calls"]]
    results = client.get(f"/api/v1/batches/{batch_id}/results", headers=AUTH).json()["results"]
    return batch_id, results, models


@pytest.fixture
def jury_batch(signed_in):
    batch_id, results, models = score_jury_batch(signed_in)
    assert sorted(models) == sorted(MEMBERS * len(ITEMS))
    return batch_id, results


def test_the_api_shows_each_member_and_the_jury(jury_batch):
    _, results = jury_batch
    assert len(results) == len(ITEMS)
    for result in results:
        comps = result["components"]
        assert sorted(comps) == ["correctness", "correctness@claude-haiku-5-5", "correctness@claude-sonnet-5-5", "correctness@opus", "exact"]
        jury = comps["correctness"]
        assert jury["status"] == "ok" and jury["score"] == 1.0 and jury["details"]["passed"] is True
        assert jury["cost_usd"] == 0.0  # its members paid
        opus = comps["correctness@opus"]
        assert opus["details"]["passed"] is False and opus["details"]["reasoning"] and opus["cost_usd"] > 0
        # The total reads the jury alone (exact 1 and the jury 1, weights 0.5 each); the score's cost is the members'.
        assert result["total_score"] == pytest.approx(1.0) and result["passed"] is True
        member_cost = sum(comps[f"correctness@{m}"]["cost_usd"] for m in ("claude-haiku-5-5", "claude-sonnet-5-5", "opus"))
        assert result["cost_usd"] == pytest.approx(member_cost)


def test_the_csv_report_has_a_column_set_per_member(signed_in, jury_batch):
    batch_id, _ = jury_batch
    r = signed_in.get(f"/api/v1/batches/{batch_id}/report.csv", headers=AUTH)
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == len(ITEMS)
    for row in rows:
        assert row["correctness_verdict"] == "True" and row["correctness@opus_verdict"] == "False"
        assert row["correctness@opus_reasoning"] and float(row["correctness@opus_cost_usd"]) > 0


def test_the_item_page_shows_the_jury_with_its_members(signed_in, jury_batch):
    _, results = jury_batch
    page = signed_in.get(f"/dashboard/items/{results[0]['item_id']}").text
    blocks = dict(re.findall(r'<div class="judge" data-judge="([^"]+)">(.*?)\n</div>', page, re.DOTALL))
    assert set(blocks) == {"correctness", "correctness@claude-haiku-5-5", "correctness@claude-sonnet-5-5", "correctness@opus"}
    jury = blocks["correctness"]
    assert "Jury: majority of 3 member(s) that answered (quorum 2)." in jury
    opus = re.search(r'<tr data-member="opus">(.*?)</tr>', jury, re.DOTALL).group(1)
    assert "anthropic claude-opus-5-5" in opus and "<td>False</td>" in opus and "$0." in opus
    assert 'data-field="cost"' in blocks["correctness@opus"]


def test_the_juries_page_and_route_give_the_librarys_alpha(signed_in, jury_batch):
    expected = krippendorff.alpha(
        reliability_data=[[1] * len(ITEMS), [1] * len(ITEMS), [0] * len(ITEMS)], level_of_measurement="nominal", value_domain=[0, 1]
    )
    report = signed_in.get("/api/v1/suites/jury_pages/jury-agreement", headers=AUTH).json()
    (h,) = report["hashes"]
    jury = h["components"]["correctness"]
    assert jury["alpha"] == pytest.approx(expected) and jury["items"] == len(ITEMS)
    assert {m: v["answered"] for m, v in jury["members"].items()} == {"claude-haiku-5-5": 3, "claude-sonnet-5-5": 3, "opus": 3}

    page = signed_in.get("/dashboard/juries")
    assert page.status_code == 200
    assert f'data-field="alpha">{expected:.3f}<' in page.text
    assert '<tr data-pair="claude-haiku-5-5/opus">' in page.text
    # An unknown suite is a 404 page, never a 500; a route call for it is problem JSON.
    assert signed_in.get("/dashboard/juries?suite=nope").status_code == 404
    missing = signed_in.get("/api/v1/suites/nope/jury-agreement", headers=AUTH)
    assert missing.status_code == 404 and "no suite named 'nope'" in missing.json()["message"]


def breakdown(page: str) -> list[tuple[str, str | None, list[str]]]:
    """The first score card's breakdown table: (component, jury it is a member of, its cells)."""
    table = re.search(r"<h3>Breakdown</h3>.*?</table>", page, re.DOTALL).group(0)
    return [
        (name, member_of, [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.DOTALL)])
        for name, member_of, cells in re.findall(
            r'<tr data-component="([^"]+)"(?: class="member" data-member-of="([^"]+)")?>(.*?)</tr>', table, re.DOTALL
        )
    ]


def test_the_item_breakdown_lists_each_member_under_its_jury_with_its_verdict(signed_in, jury_batch):
    _, results = jury_batch
    rows = breakdown(signed_in.get(f"/dashboard/items/{results[0]['item_id']}").text)
    assert [(name, member_of or None) for name, member_of, _ in rows] == [
        ("correctness", None),
        ("correctness@claude-haiku-5-5", "correctness"),
        ("correctness@claude-sonnet-5-5", "correctness"),
        ("correctness@opus", "correctness"),
        ("exact", None),
    ]
    cells = {name: c for name, _, c in rows}
    # Component, status, score, verdict, weight (a member's: its share of the jury's), attempts.
    assert cells["correctness"][1:5] == ["ok", "100.0%", "True", "0.5"]
    assert cells["correctness@opus"][1:5] == ["ok", "0.0%", "False", "0.166667"]
    assert cells["correctness@claude-haiku-5-5"][1:5] == ["ok", "100.0%", "True", "0.166667"]
    assert cells["exact"][3] == ""  # a metric has no verdict


def test_a_failed_members_reason_is_shown_under_its_jury(signed_in):
    _, results, _ = score_jury_batch(signed_in, model_kinds={"claude-opus-5-5": "malformed"})
    (result,) = [r for r in results if r["external_id"] == "q0"]
    opus = result["components"]["correctness@opus"]
    assert opus["status"] == "failed" and opus["reason"]
    page = signed_in.get(f"/dashboard/items/{result['item_id']}").text
    cells = {name: c for name, _, c in breakdown(page)}
    assert cells["correctness@opus"][1:4] == ["failed", "—", ""]
    table = re.search(r"<h3>Breakdown</h3>.*?</table>", page, re.DOTALL).group(0)
    # The member's reason row follows it, before the next component (the jury landed on the other two).
    member_at, reason_at, exact_at = (table.index(f) for f in (
        '<tr data-component="correctness@opus"', '<tr class="sub" data-reason-of="correctness@opus">', '<tr data-component="exact"'))
    assert member_at < reason_at < exact_at
    assert html.escape(opus["reason"], quote=False) in table[reason_at:exact_at]
    assert cells["correctness"][1:4] == ["ok", "100.0%", "True"]


def test_the_batch_components_list_each_member_under_its_jury(signed_in, jury_batch):
    batch_id, _ = jury_batch
    page = signed_in.get(f"/dashboard/batches/{batch_id}").text
    table = re.search(r"<h2>Components</h2>.*?<tbody>(.*?)</tbody>", page, re.DOTALL).group(1)
    rows = [
        (name, member_of, [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.DOTALL)])
        for member_of, name, cells in re.findall(
            r'<tr(?: class="member" data-member-of="([^"]+)" data-component="([^"]+)")?>(.*?)</tr>', table, re.DOTALL
        )
    ]
    assert [(name or cells[0].split()[0], member_of or None) for name, member_of, cells in rows] == [
        ("exact", None),
        ("correctness", None),
        ("correctness@claude-haiku-5-5", "correctness"),
        ("correctness@claude-sonnet-5-5", "correctness"),
        ("correctness@opus", "correctness"),
    ]
    cells = {name: c for name, _, c in rows if name}
    # Weight (its share of the jury's), mean (a pass_fail member's: its pass rate), median, ok / failed / skipped.
    assert cells["correctness@opus"][1:] == ["0.166667", "0.0%", "0.0%", "3 / 0 / 0"]
    assert cells["correctness@claude-haiku-5-5"][1:] == ["0.166667", "100.0%", "100.0%", "3 / 0 / 0"]
