"""Icons on the dashboard render without extra fonts: the "Scoring failed" badge's reason sits behind an
inline SVG icon (it was the glyph ⓘ, which no installed font has: Chromium drew a box), and every other
symbol the pages use is in a font installed here."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score
from tests.conftest import API_KEY, REPO
from tests.dashboard.support import make_app, post_sign_in
from tests.dashboard.test_pages import session_body

PAGE_SOURCES = [
    *sorted((REPO / "assay" / "api" / "dashboard" / "templates").glob("*.html")),
    *sorted((REPO / "assay" / "api" / "static").glob("*.js")),
    *sorted((REPO / "assay" / "api" / "static").glob("*.css")),
]


@pytest.fixture
def signed_in(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.sessions.publish_components", lambda refs: None)
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as client:
        r = post_sign_in(client)
        assert r.status_code == 303, r.text
        yield client


def test_a_failed_scoring_shows_its_reason_behind_an_svg_icon(signed_in):
    auth = {"Authorization": f"Bearer {API_KEY}"}
    sid = f"s-{uuid.uuid4().hex[:8]}"
    assert signed_in.post("/api/v1/sessions", json=session_body(sid, ["pods_get"]), headers=auth).status_code == 201
    assert signed_in.post(f"/api/v1/scoring/sessions/{sid}/score", json={}, headers=auth).status_code == 202
    reason = 'judge answer unusable: <b>"no verdict"</b>'
    with transaction() as session:
        for score in session.scalars(select(Score)).all():
            score.status, score.error_message = "failed", reason

    page = signed_in.get("/dashboard/sessions").text
    cell = re.search(r'<td class="score-cell">(.*?)</td>', page, re.DOTALL)[1]
    assert re.search(r'class="badge band-failed"[^>]*>Scoring failed<', cell)
    icon = re.search(r'<span class="info-icon" title="([^"]*)" role="img" aria-label="([^"]*)"><svg [^>]*>.*?</svg></span>', cell, re.DOTALL)
    assert icon, cell
    assert html.unescape(icon[1]) == html.unescape(icon[2]) == reason  # escaped in the page, shown as text
    assert "ⓘ" not in page


def _characters_without_a_font(text: str) -> set[str]:
    missing = set()
    for char in {c for c in text if ord(c) > 0x7F}:
        fonts = subprocess.run(["fc-list", f":charset={ord(char):x}", "family"], capture_output=True, text=True, check=True)
        if not fonts.stdout.strip():
            missing.add(char)
    return missing


@pytest.mark.skipif(shutil.which("fc-list") is None, reason="fontconfig's fc-list is not installed")
def test_every_symbol_the_pages_use_is_in_an_installed_font():
    # Chromium falls back through every font fontconfig knows; a character none of them has is a box.
    assert PAGE_SOURCES
    missing = {str(path.relative_to(REPO)): _characters_without_a_font(path.read_text()) for path in PAGE_SOURCES}
    assert {path: chars for path, chars in missing.items() if chars} == {}
    assert _characters_without_a_font("ⓘ") == {"ⓘ"}  # the check can see a missing glyph

