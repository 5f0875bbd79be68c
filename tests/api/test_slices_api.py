"""Issue 30: `by=metadata.KEY` through the API — the batch's slices, compare and agreement — and its
mistakes as 4xx with the reason (never a 500)."""

from __future__ import annotations

import uuid

import pytest

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Label, Score
from assay.scoring.trust import compare
from tests.scoring.test_slices import seed_two_runs


@pytest.fixture
def runs(api_client):
    compare.clear_cache()
    with transaction() as session:
        a, b = seed_two_runs(session)
    return api_client, str(a), str(b)


def test_batch_slices(runs):
    client, _, b = runs
    r = client.get(f"/api/v1/batches/{b}/slices", params={"by": "metadata.product"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["batch_id"], body["by"], body["min_items"], body["max_slices"]) == (b, "metadata.product", 10, 20)
    assert [(s["kind"], s["value"], s["n"], s["small"], s["pass_rate"]) for s in body["slices"]] == [
        ("value", "billing", 12, False, 1.0),
        ("value", "shipping", 12, False, 0.0),
        ("value", "returns", 3, True, 1.0),
        ("missing", None, 2, True, 1.0),
    ]


def test_compare_by(runs):
    client, a, b = runs
    r = client.get("/api/v1/compare", params={"a": a, "b": b, "by": "metadata.product"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["by"] == "metadata.product"
    shipping = next(s for s in body["slices"] if s["slice"]["value"] == "shipping")
    assert shipping["total"]["mean_difference"] == pytest.approx(-0.5) and shipping["losses"] == 12
    assert shipping["mcnemar"] == {"pass_to_fail": 12, "fail_to_pass": 0, "p_value": pytest.approx(2 * 0.5**12)}
    plain = client.get("/api/v1/compare", params={"a": a, "b": b}).json()
    assert plain["slices"] is None and plain["by"] is None


def test_agreement_by(runs):
    client, _, b = runs
    with transaction() as session:
        for score in session.query(Score).filter(Score.batch_id == uuid.UUID(b)):
            session.add(Label(suite_name="support", item_id=score.item_id, annotator="a", written_by="a", passed=True, source="upload"))
    r = client.get("/api/v1/suites/support/agreement", params={"by": "metadata.product"})
    assert r.status_code == 200, r.text
    [h] = r.json()["hashes"]
    assert list(h["components"]) == ["correctness", "tone"]
    shipping = next(s for s in h["slices"] if s["value"] == "shipping")
    # People pass every shipping answer; the machine fails them all (total and correctness at 0.4).
    assert shipping["total"]["accuracy"] == 0.0 and shipping["components"]["correctness"]["accuracy"] == 0.0
    assert shipping["components"]["tone"]["accuracy"] == 1.0


@pytest.mark.parametrize(
    "path",
    ["/api/v1/batches/{b}/slices", "/api/v1/compare", "/api/v1/suites/support/agreement"],
)
@pytest.mark.parametrize(
    ("by", "status", "message"),
    [
        ("product", 400, "slice by metadata.KEY"),
        ("metadata.a.b", 400, "slice by metadata.KEY"),
        ("metadata.nested", 400, "metadata.nested holds an array in some items"),
        ("metadata." + "k" * 120, 422, None),  # over the parameter's length
    ],
)
def test_a_bad_key_is_refused_with_the_reason(runs, path, by, status, message):
    client, a, b = runs
    with transaction() as session:
        for batch_id in (a, b):
            item = Item(kind="generic", external_id="nested", payload={"metadata": {"nested": [1, 2]}}, content_hash="0" * 64)
            session.add(item)
            session.flush()
            criteria_hash = session.query(Score.criteria_hash).filter(Score.batch_id == uuid.UUID(batch_id)).first()[0]
            session.add(Score(
                item_id=item.id, batch_id=uuid.UUID(batch_id), suite_name="support", criteria_hash=criteria_hash,
                status="completed", total=0.9, passed=True, components_total=0, components_landed=0, triggered_by="test",
            ))
            session.add(Label(suite_name="support", item_id=item.id, annotator="a", written_by="a", passed=True, source="upload"))
    pair = {"a": a, "b": b} if path == "/api/v1/compare" else {}
    r = client.get(path.format(b=b), params={"by": by, **pair})
    assert r.status_code == status, r.text
    if message:
        assert message in r.json()["message"]


def test_slices_of_a_missing_batch_is_a_404(api_client):
    r = api_client.get(f"/api/v1/batches/{uuid.uuid4()}/slices", params={"by": "metadata.product"})
    assert r.status_code == 404
