"""The calibration routes: validation and refusals (422 for bounds, a suite without a judge component,
a suite without stored items, a run estimated over the default cap without a budget; 404, 409), a dry
run, a run (its batch handed to the planner), its view, and the noise listing."""

from __future__ import annotations

import uuid

import pytest
import yaml
from sqlalchemy import func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import CalibrationRun, NoiseEstimate, Score, SuiteRecord
from tests.scoring.test_pipeline import make_batch
from tests.scoring.test_rescore import complete_all


@pytest.fixture
def started(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr("assay.api.routes.calibration.start_planner", calls.append)
    return calls


def scored_kql(n: int) -> None:
    batch_id, _ = make_batch(n)
    complete_all(batch_id)


def url(suite: str = "kql") -> str:
    return f"/api/v1/suites/{suite}/calibrations"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"sample": 3, "repeats": 1}, "repeats"),
        ({"sample": 3, "repeats": 21}, "repeats"),
        ({"sample": 0, "repeats": 2}, "sample"),
        ({"sample": 1001, "repeats": 2}, "sample"),
        ({"sample": 3, "repeats": 2, "budget_usd": 0}, "budget_usd"),
        ({"sample": 3, "repeats": 2, "lane": "fast"}, "lane"),
        ({"repeats": 2}, "sample"),
        ({"sample": 3, "repeats": 2, "surprise": 1}, "surprise"),
    ],
)
def test_bounds_are_422_naming_the_field(api_client, started, body, field):
    r = api_client.post(url(), json=body)
    assert r.status_code == 422, r.text
    assert field in r.text
    assert started == []


def test_unknown_and_disabled_suites(api_client, started):
    assert api_client.post(url("nope"), json={"sample": 2, "repeats": 2}).status_code == 404
    assert api_client.get("/api/v1/suites/nope/noise").status_code == 404
    assert api_client.get(f"{url()}/{uuid.uuid4()}").status_code == 404
    assert api_client.get(f"{url()}/not-a-uuid").status_code == 422
    with transaction() as s:
        record = s.get(SuiteRecord, "kql")
        record.options = {**record.options, "enabled": False}
    assert api_client.post(url(), json={"sample": 2, "repeats": 2}).status_code == 409


def test_a_suite_without_a_judge_component_is_refused(api_client, started):
    body = yaml.safe_dump({
        "name": "metrics_only",
        "kind": "generic",
        "threshold": 0.5,
        "components": {"exact": {"weight": 1.0, "metric": "exact_match", "version": 1}},
    })
    r = api_client.post("/api/v1/suites", content=body.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    r = api_client.post(url("metrics_only"), json={"sample": 2, "repeats": 3})
    assert r.status_code == 422, r.text
    assert "no judge component" in r.json()["message"]


def test_a_suite_without_stored_items_is_refused(api_client, started):
    r = api_client.post(url(), json={"sample": 2, "repeats": 3})
    assert r.status_code == 422 and "no stored items" in r.json()["message"]


def test_a_dry_run_estimates_and_writes_nothing(api_client, started):
    scored_kql(3)
    r = api_client.post(url(), json={"sample": 5, "repeats": 4, "dry_run": True, "lane": "batch"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["sample"], out["repeats"], out["dry_run"], out["calibration"]) == (3, 4, True, None)
    assert (out["estimate"]["items"], out["estimate"]["judge_calls"], out["estimate"]["carried_over"]) == (3, 12, 0)
    assert out["estimate"]["lane"] == "batch" and out["estimate"]["cost_usd"] > 0
    with transaction() as s:
        assert s.scalar(select(func.count()).select_from(CalibrationRun)) == 0
    assert started == []


def test_a_run_is_created_planned_and_readable(api_client, started):
    scored_kql(2)
    r = api_client.post(url(), json={"sample": 2, "repeats": 3, "budget_usd": 2.5})
    assert r.status_code == 202, r.text
    out = r.json()
    run = out["calibration"]
    assert r.headers["location"] == f"/api/v1/suites/kql/calibrations/{run['id']}"
    assert started == [uuid.UUID(run["batch_id"])]
    assert (run["sample"], run["repeats"], run["status"], run["budget_usd"]) == (2, 3, "running", 2.5)
    assert run["created_by"] and run["created_by"] != "api-client" and run["noise"] is None
    with transaction() as s:
        n = s.scalar(select(func.count()).where(Score.calibration_run_id == uuid.UUID(run["id"])))
    assert n == 6
    view = api_client.get(r.headers["location"])
    assert view.status_code == 200 and view.json()["progress"]["pending"] == 6
    assert api_client.get(f"/api/v1/suites/kql_strict/calibrations/{run['id']}").status_code == 404


def test_the_findings_two_large_calibrations_need_a_budget(api_client, started):
    """Issue 29: two `sample 1000, repeats 20` requests were accepted without a budget. Priced with
    config/models.yaml (the prices the fake judge's model has), each is over the default cap: refused,
    naming the estimate, the cap and how to pass a budget; with a budget each runs under it."""
    make_batch(1000)  # a thousand stored items (a machine score each; pending is enough to be sampled)
    bodies = [{"sample": 1000, "repeats": 20, "lane": lane} for lane in ("realtime", "batch")]
    for body in bodies:
        r = api_client.post(url(), json=body)
        assert r.status_code == 422, r.text
        out = r.json()
        details = out["details"]
        assert out["error"] == "budget_required" and details["setting"] == "ASSAY_CALIBRATION_MAX_USD"
        assert details["cap_usd"] == 10.0 and details["estimate_usd"] > 10.0
        assert f"estimated at ${details['estimate_usd']:,.2f}, over the $10.00" in out["message"]
        assert "pass budget_usd (assay calibrate --budget)" in out["message"]
    with transaction() as s:
        assert s.scalar(select(func.count()).select_from(CalibrationRun)) == 0
    assert started == []

    for body in bodies:
        r = api_client.post(url(), json={**body, "budget_usd": 150})
        assert r.status_code == 202, r.text
        run = r.json()["calibration"]
        assert (run["sample"], run["repeats"], run["budget_usd"]) == (1000, 20, 150)
    assert len(started) == 2


def test_without_a_budget_the_cap_is_the_budget_and_a_dry_run_tells_what_would_happen(api_client, started, monkeypatch):
    from assay.settings import get_settings

    scored_kql(2)
    r = api_client.post(url(), json={"sample": 2, "repeats": 3})
    assert r.status_code == 202, r.text
    assert r.json()["calibration"]["budget_usd"] == 10.0
    assert "without budget_usd, the run's budget is the $10.00 cap (ASSAY_CALIBRATION_MAX_USD)" in r.json()["estimate"]["notes"]

    monkeypatch.setattr(get_settings(), "calibration_max_usd", 0.001)
    dry = api_client.post(url(), json={"sample": 2, "repeats": 3, "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json()["estimate"]["notes"][-1].startswith("refused without budget_usd: this calibration (2 item(s) × 3 repeats)")
    refused = api_client.post(url(), json={"sample": 2, "repeats": 3})
    assert refused.status_code == 422 and refused.json()["details"]["cap_usd"] == 0.001
    budgeted = api_client.post(url(), json={"sample": 2, "repeats": 3, "budget_usd": 0.5, "dry_run": True})
    assert not any("budget_usd" in note for note in budgeted.json()["estimate"]["notes"])
    assert len(started) == 1


def test_noise_lists_the_latest_run_per_hash_or_says_none_was_measured(api_client, started):
    r = api_client.get("/api/v1/suites/kql/noise")
    assert r.status_code == 200
    assert r.json()["noise"] == [] and "no noise floor measured" in r.json()["note"]
    scored_kql(2)
    run_id = uuid.UUID(api_client.post(url(), json={"sample": 2, "repeats": 2}).json()["calibration"]["id"])
    with transaction() as s:
        run = s.get(CalibrationRun, run_id)
        run.status = "completed"
        s.add_all([
            NoiseEstimate(calibration_run_id=run_id, component="llm_grading", criteria_hash=run.criteria_hash,
                          suite_name="kql", sigma_w=0.2, items=2, repeats=2),
            NoiseEstimate(calibration_run_id=run_id, component="__total__", criteria_hash=run.criteria_hash,
                          suite_name="kql", sigma_w=0.05, items=2, repeats=2, flip_share=0.5),
        ])
        criteria_hash = run.criteria_hash
    out = api_client.get("/api/v1/suites/kql/noise").json()
    assert out["current_criteria_hash"] == criteria_hash and out["note"] is None
    [floor] = out["noise"]
    assert floor["sigma_w"] == {"llm_grading": 0.2} and floor["sigma_w_total"] == 0.05
    assert (floor["flip_share"], floor["items"], floor["repeats"]) == (0.5, 2, 2)
    assert api_client.get(f"/api/v1/suites/kql/noise?criteria_hash={criteria_hash}").json()["noise"] == [floor]
    other = api_client.get(f"/api/v1/suites/kql/noise?criteria_hash={'0' * 64}").json()
    assert other["noise"] == [] and "no noise floor measured" in other["note"]
    assert api_client.get("/api/v1/suites/kql/noise?criteria_hash=xyz").status_code == 422
    view = api_client.get(f"{url()}/{run_id}").json()
    assert view["noise"]["sigma_w_total"] == 0.05
