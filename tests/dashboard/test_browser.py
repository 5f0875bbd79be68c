"""The dashboard in a real browser (Debian's Chromium through Playwright) against a live API and a live
worker judged by the loopback fake: sign in, submit a file, watch the progress, read the summary
sections, download the Excel report and open it; score an alert session and see its badge appear."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import httpx
import pytest
from openpyxl import load_workbook

from tests.conftest import API_KEY, REPO, worker_env
from tests.dashboard.support import api_process
from tests.fakes.anthropic_server import FakeAnthropic

EXAMPLES = REPO / "examples" / "kql_items.jsonl"
COPIES = 10  # 40 items: long enough to watch the bar move


@pytest.fixture
def fake_judge():
    with FakeAnthropic(latency=0.4) as fake:
        yield fake


@pytest.fixture
def live_api(clean_db, live_worker_factory, fake_judge, tmp_path):
    live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"},
        concurrency=2,
    )
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


def shot(page, name: str) -> None:
    """Keep a screenshot when ASSAY_SCREENSHOT_DIR is set (to look at the pages)."""
    folder = os.environ.get("ASSAY_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def sign_in(page, url: str, next_path: str = "/dashboard/") -> None:
    page.goto(url + next_path)
    assert "/dashboard/sign-in" in page.url, page.url  # no data before signing in
    assert page.locator("table#batches").count() == 0
    shot(page, "sign-in")
    page.fill('input[name="api_key"]', "not-a-key")
    page.click('form[action="/dashboard/sign-in"] button[type="submit"]')
    assert page.locator("p.error").is_visible()
    page.fill('input[name="api_key"]', API_KEY)
    page.click('form[action="/dashboard/sign-in"] button[type="submit"]')
    page.wait_for_url(url + next_path)


def test_sign_in_submit_watch_progress_and_download_the_excel_report(chromium, live_api, tmp_path):
    from playwright.sync_api import expect

    page = chromium.new_page()
    sign_in(page, live_api)
    cookies = {c["name"]: c for c in chromium.cookies()}
    assert cookies["assay_session"]["httpOnly"] and cookies["assay_session"]["secure"]
    assert cookies["assay_session"]["sameSite"] == "Lax"

    items = tmp_path / "items.jsonl"
    examples = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    # COPIES of the examples, each with its own id (ids are unique within an upload)
    items.write_text("".join(json.dumps({**item, "id": f"{item['id']}-{n}"}) + "\n" for n in range(COPIES) for item in examples))
    page.select_option('#upload-form select[name="suite"]', "kql")
    page.set_input_files('#upload-form input[type="file"]', str(items))
    page.click('#upload-form button[type="submit"]')
    page.wait_for_url(re.compile(r".*/dashboard/batches/[0-9a-f-]{36}$"))
    batch_id = page.url.rsplit("/", 1)[-1]
    total = 4 * COPIES

    # Design 000's live results: finished queries appear while the batch runs.
    page.wait_for_selector("[data-live-results] .result-card", timeout=60_000)
    assert "Score: " in page.locator("[data-live-results] .result-card").first.inner_text()
    shot(page, "batch-running")

    # The list: the batch's bar moves and its status turns to completed, without reloading the page.
    page.goto(live_api + "/dashboard/")
    row = page.locator(f'tr[data-batch-id="{batch_id}"]')
    expect(row).to_have_count(1)
    progress = row.locator('[data-field="progress_text"]')
    drawn = int(progress.inner_text().split(" / ")[0])
    assert drawn < total and row.get_attribute("data-active") == "true"  # still running when drawn
    page.evaluate("window.__sameDocument = true")
    expect(row.locator('[data-field="status"]')).to_have_text("completed", timeout=120_000)
    expect(progress).to_have_text(re.compile(rf"^{total} / {total} \(100\.0%\)"))
    assert page.evaluate("window.__sameDocument === true")  # updated in place by polling, not reloaded
    assert row.locator('[data-field="pass_rate"]').inner_text().endswith("%")
    assert row.locator('[data-field="cost_usd"]').inner_text().startswith("$")
    shot(page, "batches")

    # The batch page: the KQL scoring design's success and error sections, the histogram, the components.
    page.goto(f"{live_api}/dashboard/batches/{batch_id}")
    passed = page.locator("#success .result-card.pass").count()
    failed = page.locator("#errors .result-card.fail").count()
    assert passed + failed == total and passed > 0 and failed > 0
    assert "PASS ≥90%" in page.locator("#success").inner_text()
    errors = page.locator("#errors").inner_text()
    assert "FAIL <90%" in errors and "Judge's reasoning" in errors
    assert page.locator(".histogram .hbin").count() == 10
    assert page.locator("#live-results").count() == 0  # finished: the summary replaces the feed
    shot(page, "batch-done")

    # The Excel report, downloaded by the browser with its session cookie, opened with openpyxl.
    with page.expect_download() as download:
        page.click("#download-xlsx")
    path = tmp_path / "report.xlsx"
    download.value.save_as(path)
    assert download.value.suggested_filename == f"batch-{batch_id}-report.xlsx"
    wb = load_workbook(path)
    assert wb.sheetnames == ["Summary", "Results"]
    summary = {r[0]: r[1] for r in wb["Summary"].iter_rows(values_only=True) if r and r[0]}
    assert summary["Batch"] == batch_id and summary["Items"] == total and summary["Passed"] == passed
    rows = list(wb["Results"].iter_rows(values_only=True))
    assert rows[0][:7] == ("Total Score", "Score Status", "Schema Match Score", "Semantic Similarity Score",
                           "Results Match Score", "LLM Grading Score", "LLM Reasoning")
    assert len(rows) == total + 1
    assert sum(1 for r in rows[1:] if r[1] == "PASS") == passed

    # The item page: breakdown, reasoning, usage and cost, the score with its criteria hash.
    page.locator("#errors .result-card a").first.click()
    page.wait_for_url(re.compile(r".*/dashboard/items/"))
    card = page.locator(".score-card").first
    text = card.inner_text().lower()
    assert "current criteria" in text and "reasoning" in text and "tokens" in text
    shot(page, "item")

    # Signing out ends it: the pages are gone again.
    page.click("text=Sign out")
    page.wait_for_url(re.compile(r".*/dashboard/sign-in"))
    page.goto(f"{live_api}/dashboard/batches/{batch_id}")
    assert "/dashboard/sign-in" in page.url




def completed_session(session_id: str) -> dict:
    """A finished TARSy investigation, as ``POST /api/v1/sessions`` takes it (the alert-session scoring design, issue 5)."""
    return {
        "session_id": session_id,
        "status": "completed",
        "alert_type": "SuspiciousBinary",
        "alert_data": {"namespace": "prod", "pod": "web-1", "binary": "/tmp/xmrig", "severity": "high"},
        "conversation": [
            {"type": "message", "role": "user", "content": "Alert: /tmp/xmrig executed in prod/web-1."},
            {"type": "message", "role": "assistant", "content": "I will check whether the pod is running."},
            {"type": "tool_call", "tool_name": "pods_get", "server": "kubernetes-server",
             "arguments": {"namespace": "prod", "name": "web-1"}, "result": "web-1 1/1 Running"},
            {"type": "message", "role": "assistant", "content": "Verdict: MALICIOUS crypto miner, high confidence."},
        ],
        "final_analysis": "MALICIOUS: a crypto miner runs in prod/web-1 (high confidence).",
        "available_tools": ["pods_get", "pods_list", "list-files", "read-file", "list-processes-in-pod"],
    }


def test_score_session_button_shows_the_badge(chromium, live_api):
    from playwright.sync_api import expect

    session_id = f"sess-{uuid.uuid4().hex[:8]}"
    r = httpx.post(
        f"{live_api}/api/v1/sessions", json=completed_session(session_id),
        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30,
    )
    assert r.status_code in (200, 201, 202), r.text

    page = chromium.new_page()
    sign_in(page, live_api, "/dashboard/sessions")
    badge = page.locator(f'[data-session-badge="{session_id}"]')
    expect(badge).to_have_text("Not scored")
    shot(page, "sessions-before")
    page.locator(f'tr[data-session-id="{session_id}"] button.score-session').click()
    expect(badge).to_have_text(re.compile(r"^\d{1,3}$"), timeout=90_000)
    value = int(badge.inner_text())
    bands = [(90, "band-darkgreen"), (75, "band-lightgreen"), (60, "band-yellow"), (45, "band-orange"), (0, "band-red")]
    expected = next(css for low, css in bands if value >= low)
    assert expected in (badge.get_attribute("class") or "")
    shot(page, "sessions-after")

    # Its detail page: the breakdown card, reasoning, missing tools, approaches, usage and cost.
    page.goto(f"{live_api}/dashboard/sessions/{session_id}")
    card = page.locator(".score-card").first
    text = card.inner_text()
    for heading in ("Breakdown", "Reasoning", "Missing tools", "Alternative approaches", "Cost", "Tokens"):
        assert heading.lower() in text.lower(), heading
    assert "current criteria" in text
    expect(page.locator(f'[data-session-badge="{session_id}"]')).to_have_text(str(value))
    shot(page, "session")
