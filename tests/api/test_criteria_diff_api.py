"""``GET /api/v1/criteria/diff`` on the known case of tests/scoring/test_diff.py: JSON, CSV, mistakes, auth."""

import csv
import io

import pytest

from assay.scoring.store.db import transaction
from tests.scoring.test_diff import NEW, OLD, seed_known_case

URL = "/api/v1/criteria/diff"


@pytest.fixture
def case(api_client):
    with transaction() as session:
        return seed_known_case(session)


def test_json_has_the_aggregates_and_a_page(api_client, case):
    r = api_client.get(URL, params={"from": OLD[:8], "to": NEW, "suite": "s1", "limit": 2, "offset": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["from_hash"], body["to_hash"], body["suite"]) == (OLD, NEW, "s1")
    assert (body["total"], body["limit"], body["offset"]) == (4, 2, 1)
    s = body["summary"]
    assert (s["items_compared"], s["items_only_from"], s["items_only_to"]) == (4, 1, 1)
    assert (s["mean_old_total"], s["mean_new_total"], s["mean_delta"]) == (0.625, 0.6875, 0.0625)
    assert (s["pass_to_fail"], s["fail_to_pass"], s["cost_usd"], s["cost_usd_from"]) == (1, 1, 1.375, 1.125)
    keys = ("component", "n", "mean_old", "mean_new", "mean_shift")
    assert [{k: c[k] for k in keys} for c in s["components"]] == [
        {"component": "a", "n": 4, "mean_old": 0.5625, "mean_new": 0.6875, "mean_shift": 0.125},
        {"component": "b", "n": 2, "mean_old": 0.75, "mean_new": 0.5, "mean_shift": -0.25},
    ]
    # b's two shifts (0 and −0.5) resample to means 0, −.25, −.5: the interval is their whole range.
    assert (s["components"][1]["ci_low"], s["components"][1]["ci_high"]) == (-0.5, 0.0)
    assert s["components"][0]["ci_low"] < 0.125 < s["components"][0]["ci_high"]
    assert (s["wins"], s["ties"], s["losses"], s["mcnemar_p_value"], s["resamples"]) == (3, 0, 1, 1.0, 2000)
    assert s["ci_low"] < 0.0625 < s["ci_high"] and s["interval_note"] is None
    assert (s["noise_floor"], s["beyond_noise"], s["noise_note"]) == (None, None, "no noise floor measured")
    assert (s["item_noise_floor"], s["noise_from"], s["noise_to"]) == (None, None, None)
    assert (s["components_only_from"], s["components_only_to"]) == (["c"], ["d"])
    # Largest |delta| first (q2), then ties by item id: offset 1 skips q2.
    tied = sorted(str(case[q]) for q in ("q1", "q3", "q4"))
    assert [i["item_id"] for i in body["items"]] == tied[:2]


def test_json_flips_only(api_client, case):
    r = api_client.get(URL, params={"from": OLD, "to": NEW, "suite": "s1", "flips_only": "true"})
    assert r.status_code == 200, r.text
    assert r.json()["total"] == 2
    assert r.json()["items"] == [
        {"item_id": str(case["q2"]), "external_id": "q2", "old_total": 1.0, "new_total": 0.5, "delta": -0.5,
         "old_passed": True, "new_passed": False, "flip": "pass→fail", "beyond_noise": None},
        {"item_id": str(case["q1"]), "external_id": "q1", "old_total": 0.5, "new_total": 0.75, "delta": 0.25,
         "old_passed": False, "new_passed": True, "flip": "fail→pass", "beyond_noise": None},
    ]


def test_csv_streams_every_pair_as_an_attachment(api_client, case):
    r = api_client.get(URL, params={"from": OLD, "to": NEW[:12], "suite": "s1", "format": "csv", "limit": 1})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == f'attachment; filename="criteria-diff-{OLD[:12]}-{NEW[:12]}.csv"'
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["item_id", "external_id", "old_total", "new_total", "delta", "old_passed", "new_passed", "flip", "beyond_noise"]
    by_item = sorted(case[q] for q in ("q1", "q2", "q3", "q4"))
    assert [row[0] for row in rows[1:]] == [str(i) for i in by_item]  # every pair, whatever the limit
    lines = {row[1]: row[2:] for row in rows[1:]}
    assert lines["q2"] == ["1.0", "0.5", "-0.5", "True", "False", "pass→fail", ""]  # no noise floor measured
    assert lines["q3"] == ["0.75", "1.0", "0.25", "True", "True", "", ""]


def test_noise_floor_beside_the_means_and_per_item(api_client, case):
    from tests.scoring.test_diff import _calibrate

    with transaction() as session:
        _calibrate(session, OLD, {"__total__": 0.15})
        _calibrate(session, NEW, {"__total__": 0.2})
    s = api_client.get(URL, params={"from": OLD, "to": NEW, "suite": "s1"}).json()["summary"]
    assert s["noise_floor"] == pytest.approx(0.245)  # 1.96·√((.0225 + .04)/4)
    assert s["beyond_noise"] is False and s["noise_note"] is None
    assert s["item_noise_floor"] == pytest.approx(0.49)  # 1.96·√(.0625)
    assert (s["noise_from"]["sigma_w_total"], s["noise_to"]["sigma_w_total"]) == (0.15, 0.2)
    r = api_client.get(URL, params={"from": OLD, "to": NEW, "suite": "s1", "format": "csv"})
    lines = {row[1]: row[-1] for row in csv.reader(io.StringIO(r.text))}
    assert {k: lines[k] for k in ("q1", "q2", "q3", "q4")} == {"q1": "False", "q2": "True", "q3": "False", "q4": "False"}


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_unknown_hash_is_404_naming_it(api_client, case, fmt):
    r = api_client.get(URL, params={"from": OLD, "to": "deadbeef", "format": fmt})
    assert r.status_code == 404
    assert r.json()["error"] == "not_found" and "deadbeef" in r.json()["message"]


def test_same_hash_twice_is_400(api_client, case):
    r = api_client.get(URL, params={"from": OLD[:8], "to": OLD})
    assert r.status_code == 400
    assert "same criteria" in r.json()["message"]


@pytest.mark.parametrize(
    "params",
    [{"from": OLD}, {"to": NEW}, {"from": "xyz12345", "to": NEW}, {"from": OLD, "to": NEW, "limit": 1001}],
)
def test_missing_or_malformed_parameters_are_422(api_client, params):
    r = api_client.get(URL, params=params)
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_request"


def test_auth_is_required(api_client, case):
    r = api_client.get(URL, params={"from": OLD, "to": NEW}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
