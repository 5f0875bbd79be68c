"""``GET /api/v1/compare`` on the known case of tests/scoring/test_compare.py: JSON, CSV, mistakes, auth."""

import csv
import io
import uuid

import pytest
from fastapi.testclient import TestClient

from assay.scoring.store.db import transaction
from assay.scoring.trust import compare
from tests.scoring.test_compare import H, add_noise, seed

URL = "/api/v1/compare"


@pytest.fixture
def batches(api_client):
    compare.clear_cache()
    with transaction() as session:
        a, b = seed(session)
        add_noise(session, H, {"__total__": 0.1, "a": 0.2})
    return str(a), str(b)


def test_json_report(api_client, batches):
    a, b = batches
    r = api_client.get(URL, params={"a": a, "b": b})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["a"]["batch_id"], body["b"]["batch_id"], body["warnings"]) == (a, b, [])
    assert (body["matched"], body["paired"], body["excluded"]) == (7, 5, 2)
    assert body["a"]["counts"] == {
        "scores": 9, "usable": 7, "partial": 1, "failed": 1, "pending": 0, "cancelled": 0,
        "no_external_id": 1, "repeated_external_id": 0, "only_here": 1,
    }
    assert (body["a"]["only_here"], body["b"]["only_here"]) == (["e7"], ["e8"])
    assert body["a"]["noise"]["sigma_w_total"] == 0.1 and body["a"]["noise"]["sigma_w"] == {"a": 0.2}
    total = body["total"]
    assert (total["name"], total["n"], total["mean_a"], total["mean_b"]) == ("total", 5, 0.65, 0.7)
    assert total["mean_difference"] == pytest.approx(0.05)
    assert total["ci_low"] < 0.05 < total["ci_high"] and total["resamples"] == 2000
    assert total["noise_floor"] == pytest.approx(0.12396, abs=1e-5) and total["beyond_noise"] is False
    assert (body["wins"], body["ties"], body["losses"]) == (3, 1, 1)
    assert body["mcnemar"] == {"pass_to_fail": 1, "fail_to_pass": 1, "p_value": 1.0}
    assert body["pass_rate"]["mean_difference"] == 0.0
    comps = {c["name"]: c for c in body["components"]}
    assert comps["b"]["n"] == 4 and comps["b"]["noise_note"] == "no noise floor measured"
    assert comps["a"]["noise_floor"] == pytest.approx(0.24792, abs=1e-5)
    assert [p["external_id"] for p in body["moved_most"]] == ["e2", "e1", "e3", "e4", "e10"]
    assert body["moved_most"][0]["beyond_noise"] is True
    assert [(p["external_id"], p["flip"]) for p in body["flipped"]] == [("e1", "fail→pass"), ("e2", "pass→fail")]
    assert body["item_noise_floor"] == pytest.approx(0.27719, abs=1e-5)
    # The same inputs give the same interval.
    again = api_client.get(URL, params={"a": a, "b": b}).json()["total"]
    assert (again["ci_low"], again["ci_high"]) == (total["ci_low"], total["ci_high"])


def test_csv_streams_every_pair(api_client, batches):
    a, b = batches
    r = api_client.get(URL, params={"a": a, "b": b, "format": "csv"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == f'attachment; filename="compare-{a[:8]}-{b[:8]}.csv"'
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert list(rows[0]) == compare.CSV_COLUMNS
    assert [(row["external_id"], row["match"]) for row in rows][:7] == [
        ("e1", "paired"), ("e10", "paired"), ("e2", "paired"), ("e3", "paired"), ("e4", "paired"),
        ("e5", "excluded"), ("e6", "excluded"),
    ]
    assert len(rows) == 12
    e2 = rows[2]
    assert (e2["a_total"], e2["b_total"], e2["delta"], e2["flip"], e2["beyond_noise"]) == ("1.0", "0.5", "-0.5", "pass→fail", "True")


@pytest.mark.parametrize(
    ("params", "location"),
    [
        ({"a": "not-a-uuid"}, "query.a"),
        ({"b": None}, "query.b"),
        ({"format": "xml"}, "query.format"),
    ],
)
def test_bad_parameters_are_422(api_client, batches, params, location):
    a, b = batches
    query = {k: v for k, v in {"a": a, "b": b, **params}.items() if v is not None}
    r = api_client.get(URL, params=query)
    assert r.status_code == 422, r.text
    assert [e["location"] for e in r.json()["details"]["errors"]] == [location]


def test_same_batch_is_400_and_a_missing_one_404(api_client, batches):
    a, _ = batches
    r = api_client.get(URL, params={"a": a, "b": a})
    assert r.status_code == 400 and "same batch" in r.json()["message"]
    missing = str(uuid.uuid4())
    for fmt in ("json", "csv"):
        r = api_client.get(URL, params={"a": a, "b": missing, "format": fmt})
        assert r.status_code == 404 and missing in r.json()["message"]


def test_needs_a_key(api_client, batches):
    a, b = batches
    with TestClient(api_client.app) as anonymous:
        assert anonymous.get(URL, params={"a": a, "b": b}).status_code == 401
