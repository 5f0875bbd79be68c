"""The compare page without a browser, on the known case of tests/scoring/test_compare.py: the report,
the batch picker, mistakes, sign-in."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape

import pytest
from fastapi.testclient import TestClient

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Item, Score, SuiteRecord
from assay.scoring.trust import compare
from tests.dashboard.support import make_app, post_sign_in
from tests.scoring.test_compare import H, add_noise, seed
from tests.scoring.test_slices import seed_two_runs


@pytest.fixture
def client(clean_db):
    compare.clear_cache()
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as c:
        yield c


@pytest.fixture
def signed_in(client):
    r = post_sign_in(client)
    assert r.status_code == 303, r.text
    return client


@pytest.fixture
def batches():
    with transaction() as session:
        a, b = seed(session)
        add_noise(session, H, {"__total__": 0.1})
    return str(a), str(b)


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_report(signed_in, batches):
    a, b = batches
    r = signed_in.get("/dashboard/compare", params={"a": a, "b": b})
    assert r.status_code == 200, r.text
    text = _text(r.text)
    assert "Matched 7 Paired 5 Excluded 2" in text
    assert "Wins / ties / losses of b 3 / 1 / 1" in text
    assert "McNemar (pass→fail / fail→pass) 1 / 1 · p = 1" in text
    assert "Total 5 0.650 0.700 +0.050 [" in text
    assert "±0.124 within noise" in text  # 1.96·0.1·√(2/5)
    assert "Per-item noise floor ±0.277" in text
    assert "no noise floor measured" in text  # component a and b have no σw
    assert f'href="/api/v1/compare?a={a}&amp;b={b}&amp;format=csv"' in r.text
    moved = r.text.split('id="compare-moved"')[1].split("</table>")[0]
    assert re.findall(r'data-external-id="([^"]+)"', moved) == ["e2", "e1", "e3", "e4", "e10"]
    assert "beyond noise" in moved  # e2 moved 0.5 > 0.277
    flipped = r.text.split('id="compare-flipped"')[1].split("</table>")[0]
    assert re.findall(r'data-external-id="([^"]+)"', flipped) == ["e1", "e2"]


def test_warnings_are_shown(signed_in):
    with transaction() as session:
        a, b = seed(session, b_suite="s2")
    text = _text(signed_in.get("/dashboard/compare", params={"a": str(a), "b": str(b)}).text)
    assert "Warning: the batches belong to different suites ('s1' and 's2')" in text


def test_picker_lists_the_suites_other_batches(signed_in, batches):
    a, b = batches
    r = signed_in.get("/dashboard/compare", params={"a": a})
    assert r.status_code == 200
    assert f'href="/dashboard/compare?a={a}&amp;b={b}"' in r.text
    assert f"?a={a}&amp;b={a}" not in r.text


def _options(html: str, side: str) -> list[str]:
    picker = html.split(f'id="pick-{side}"')[1].split("</select>")[0]
    return [_text(option) for option in re.findall(r'<option value="[^"]+"[^>]*>(.*?)</option>', picker)]


def test_opened_bare_it_offers_the_latest_batches_for_a_and_b(signed_in):
    with transaction() as session:
        a, b = seed_two_runs(session)
        # The latest batch first: B is made the newer one.
        session.get(Batch, b).created_at = session.get(Batch, a).created_at + timedelta(minutes=1)
        session.get(Batch, a).total_items, session.get(Batch, b).total_items = 30, 29
    r = signed_in.get("/dashboard/compare")
    assert r.status_code == 200, r.text
    for side in ("a", "b"):
        options = _options(r.text, side)
        assert len(options) == 2, options
        assert options[0].startswith("support · ") and options[0].endswith(f"· 29 items · {str(b)[:8]}")
        assert options[1].endswith(f"· 30 items · {str(a)[:8]}")
    assert 'name="by"' in r.text and 'placeholder="metadata.KEY"' in r.text
    assert 'id="compare-report"' not in r.text


def test_the_picker_keeps_the_chosen_batches_and_offers_at_most_the_latest(signed_in, batches, monkeypatch):
    a, b = batches
    monkeypatch.setattr("assay.api.dashboard.compare_pages.RECENT", 1)
    with transaction() as session:
        b_is_newer = session.get(Batch, uuid.UUID(b)).created_at > session.get(Batch, uuid.UUID(a)).created_at
        session.get(Batch, uuid.UUID(a)).created_at -= timedelta(minutes=0 if b_is_newer else 1)
    r = signed_in.get("/dashboard/compare", params={"a": a, "b": b})
    # Only b is recent enough to be offered; a, chosen, is still there and selected.
    picker_a = r.text.split('id="pick-a"')[1].split("</select>")[0]
    picker_b = r.text.split('id="pick-b"')[1].split("</select>")[0]
    assert re.findall(r'<option value="([^"]+)"', picker_a) == [b, a] and f'<option value="{a}" selected>' in picker_a
    assert re.findall(r'<option value="([^"]+)"', picker_b) == [b] and f'<option value="{b}" selected>' in picker_b


def test_the_report_per_slice_shows_the_slice_that_regressed(signed_in):
    with transaction() as session:
        a, b = seed_two_runs(session)
    r = signed_in.get("/dashboard/compare", params={"a": str(a), "b": str(b), "by": "metadata.product"})
    assert r.status_code == 200, r.text
    table = r.text.split('id="compare-slices"')[1].split("</table>")[0]
    rows = {name: _text(row) for name, row in re.findall(r'<tr data-slice="([^"]+)"[^>]*>(.*?)</tr>', table, re.DOTALL)}
    assert list(rows) == ["billing", "shipping", "returns", "missing"]
    assert rows["billing"].startswith("billing 12 0.900 0.900 +0.000 [+0.000, +0.000]")
    assert rows["shipping"].startswith("shipping 12 0.900 0.400 -0.500 [-0.500, -0.500]")
    assert "12 / 0 · p = 0.0004883" in rows["shipping"] and "small" not in rows["shipping"]
    assert "small fewer than 10 items" in rows["returns"]
    assert 'value="metadata.product"' in r.text


@pytest.mark.parametrize(
    ("by", "message"),
    [("product", "slice by metadata.KEY"), ("metadata.product", "metadata.product holds an object in some items")],
)
def test_a_bad_slice_key_is_a_400_with_the_reason(signed_in, by, message):
    with transaction() as session:
        a, b = seed_two_runs(session)
        for batch_id in (a, b):
            item = Item(kind="generic", external_id="nested", payload={"metadata": {"product": {"x": 1}}}, content_hash="0" * 64)
            session.add(item)
            session.flush()
            batch = session.get(Batch, batch_id)
            session.add(Score(
                item_id=item.id, batch_id=batch_id, suite_name="support", criteria_hash=batch.criteria_hash,
                status="completed", total=0.9, passed=True, components_total=0, components_landed=0, triggered_by="test",
            ))
    r = signed_in.get("/dashboard/compare", params={"a": str(a), "b": str(b), "by": by})
    assert r.status_code == 400
    assert message in _text(r.text)


def test_the_batch_page_links_to_it(signed_in):
    with transaction() as session:
        kql = session.get(SuiteRecord, "kql")
        batch = Batch(suite_name="kql", criteria_hash=kql.current_criteria_hash, status="completed", created_by="t", total_items=0)
        session.add(batch)
        session.flush()
        batch_id = str(batch.id)
    r = signed_in.get(f"/dashboard/batches/{batch_id}")
    assert r.status_code == 200, r.text
    assert f'href="/dashboard/compare?a={batch_id}" id="compare-with"' in r.text


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({"a": "nope", "b": None}, 400, "&#39;a&#39; is not a batch id"),
        ({"b": "a" * 64}, 400, "&#39;b&#39; is not a batch id"),
        ({"b": "A"}, 400, "the same batch"),
        ({"b": "missing"}, 404, "There is no batch "),
    ],
)
def test_mistakes(signed_in, batches, params, status, message):
    a, b = batches
    query = {"a": a, "b": b, **params}
    if query["b"] == "A":
        query["b"] = a
    if query["b"] == "missing":
        query["b"] = str(uuid.uuid4())
    r = signed_in.get("/dashboard/compare", params={k: v for k, v in query.items() if v is not None})
    assert r.status_code == status
    assert message in r.text


def test_too_long_a_parameter_is_refused(signed_in, batches):
    assert signed_in.get("/dashboard/compare", params={"a": "x" * 65}).status_code == 422


def test_needs_sign_in(client, batches):
    a, b = batches
    r = client.get("/dashboard/compare", params={"a": a, "b": b})
    assert r.status_code in (302, 303, 307) and "/dashboard/sign-in" in r.headers["location"]

