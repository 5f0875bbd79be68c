"""Issue 18 in a real browser: the sign-out button ends the session (the old cookie opens nothing),
and behind the trusted proxy the pages' own requests pass the CSRF check."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.conftest import API_KEY, worker_env
from tests.dashboard.support import api_process
from tests.dashboard.test_browser import EXAMPLES, sign_in


@pytest.fixture
def api_url(clean_db, tmp_path):
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


@pytest.fixture
def proxied_api_url(clean_db, tmp_path):
    # Loopback is the trusted proxy here: the browser's requests come "through" it.
    env = worker_env({"ASSAY_TRUSTED_PROXIES": json.dumps(["127.0.0.1/32"])})
    with api_process(env, log=tmp_path / "api.log") as url:
        yield url


def test_the_sign_out_button_ends_the_session(chromium, api_url):
    page = chromium.new_page()
    sign_in(page, api_url)
    old = next(c for c in chromium.cookies() if c["name"] == "assay_session")
    page.click("text=Sign out")
    page.wait_for_url(re.compile(r".*/dashboard/sign-in"))
    assert not [c for c in chromium.cookies() if c["name"] == "assay_session"]
    # The cookie from before the sign-out, put back, opens nothing.
    chromium.add_cookies([old])
    page.goto(api_url + "/dashboard/criteria")
    assert "/dashboard/sign-in" in page.url
    r = httpx.get(f"{api_url}/api/v1/batches", cookies={"assay_session": old["value"]})
    assert r.status_code == 401


def test_behind_the_proxy_the_pages_upload_with_their_csrf_token(chromium, proxied_api_url, tmp_path):
    chromium.set_extra_http_headers({"X-Forwarded-User": "alice@example.com"})
    page = chromium.new_page()
    sent = []
    page.on("request", lambda r: sent.append(r) if r.method == "POST" else None)
    page.goto(proxied_api_url + "/dashboard/")
    assert "alice@example.com" in page.locator("header .who").inner_text()
    assert page.locator("text=Sign out").count() == 0
    items = tmp_path / "items.jsonl"
    items.write_bytes(EXAMPLES.read_bytes())
    page.select_option('#upload-form select[name="suite"]', "kql")
    page.set_input_files('#upload-form input[type="file"]', str(items))
    page.click('#upload-form button[type="submit"]')
    page.wait_for_url(re.compile(r".*/dashboard/batches/[0-9a-f-]{36}$"))
    assert sent and sent[0].headers.get("x-csrf-token")
    batch_id = page.url.rsplit("/", 1)[-1]
    batch = httpx.get(
        f"{proxied_api_url}/api/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {API_KEY}"}
    ).json()
    assert batch["created_by"] == "proxy:alice@example.com"
