"""The API docs (/docs) in a real browser (Debian's Chromium through Playwright) against a live API:
Swagger UI renders the API's operations under the page's Content-Security-Policy, with no violation
reported and no request to any other origin."""

from __future__ import annotations

from tests.conftest import worker_env
from tests.dashboard.support import api_process
from tests.dashboard.test_browser import shot


def test_swagger_ui_renders_under_the_csp_from_this_site_only(clean_db, chromium, tmp_path):
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        page = chromium.new_page()
        problems: list[str] = []
        requested: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: requested.append(r.url))
        page.goto(url + "/docs")
        try:
            page.wait_for_selector(".swagger-ui .info .title")
        except Exception as exc:
            shot(page, "docs-not-rendered")
            raise AssertionError(f"Swagger UI did not render; errors: {problems}; page: {page.inner_text('body')[:500]}") from exc
        assert "Assay" in page.inner_text(".swagger-ui .info .title")
        # The operations are listed: the OpenAPI document was fetched and rendered.
        page.wait_for_selector(".opblock-summary-path")
        paths = page.locator(".opblock-summary-path").all_inner_texts()
        assert any("/api/v1/batches" in p for p in paths), paths
        shot(page, "docs")
        assert problems == []
        assert requested and all(u.startswith((url + "/", "data:")) for u in requested), requested
