"""Slice by (metadata.KEY) on a batch page and on the Agreement page, and the Agreement page's judge
components, without a browser, on the designed data of tests/scoring/test_slices.py."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Label, Score
from tests.dashboard.support import make_app, post_sign_in
from tests.dashboard.test_compare_pages import _text
from tests.scoring.test_slices import seed_two_runs


@pytest.fixture
def signed_in(clean_db):
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as client:
        assert post_sign_in(client).status_code == 303
        yield client


def _rows(html: str, section: str) -> dict[str, str]:
    table = html.split(section)[1].split("</table>")[0]
    return {name: _text(row) for name, row in re.findall(r'<tr data-slice="([^"]+)"[^>]*>(.*?)</tr>', table, re.DOTALL)}


def test_the_batch_page_shows_its_slices(signed_in):
    with transaction() as session:
        _, b = seed_two_runs(session)
    r = signed_in.get(f"/dashboard/batches/{b}", params={"by": "metadata.product"})
    assert r.status_code == 200, r.text
    rows = _rows(r.text, 'id="slices"')
    assert list(rows) == ["billing", "shipping", "returns", "missing"]
    assert rows["billing"].startswith("billing 12 12 12 0 100")
    assert rows["shipping"].startswith("shipping 12 12 0 0 0")
    assert "small" in rows["returns"] and "small" not in rows["shipping"]
    bad = signed_in.get(f"/dashboard/batches/{b}", params={"by": "product"})
    assert bad.status_code == 400 and "slice by metadata.KEY" in _text(bad.text)


def test_the_agreement_page_shows_each_judge_component_and_each_slice(signed_in):
    with transaction() as session:
        _, b = seed_two_runs(session)
        for item_id in session.scalars(select(Score.item_id).where(Score.batch_id == b)):
            session.add(Label(suite_name="support", item_id=item_id, annotator="a", written_by="a", passed=True, source="upload"))
    r = signed_in.get("/dashboard/agreement", params={"suite": "support", "by": "metadata.product"})
    assert r.status_code == 200, r.text
    components = r.text.split('data-field="components"')[1].split("</table>")[0]
    named = dict(re.findall(r'<tr data-component="([^"]+)">(.*?)</tr>', components, re.DOTALL))
    assert list(named) == ["total", "correctness", "tone"]
    # 17 of 29 answers pass (shipping's 12 fail), and people pass all of them.
    assert _text(named["correctness"]).startswith("correctness 29 58.6%")
    assert _text(named["tone"]).startswith("tone 29 100")  # tone (0.8) passes every item, as people do
    slices = r.text.split('data-field="slices"')[1].split("</table>")[0]
    assert re.findall(r'data-slice="([^"]+)"', slices) == ["billing", "shipping", "returns", "(no value)"]
    assert "returns · total · small" in _text(slices)
    bad = signed_in.get("/dashboard/agreement", params={"suite": "support", "by": "metadata."})
    assert bad.status_code == 400 and "slice by metadata.KEY" in _text(bad.text)
