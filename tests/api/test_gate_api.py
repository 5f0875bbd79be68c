"""``GET /api/v1/gate`` on designed batches in PostgreSQL: a regression fails naming its rules and the
failing items (an errored candidate item among them), a drop inside the measured noise floor passes,
different criteria fail with the reason; mistakes are 400/404, and the route needs a key."""

from __future__ import annotations

import json
import uuid

import pytest
from fastapi.testclient import TestClient

from assay.scoring.store.db import transaction
from assay.scoring.store.models import CriteriaDefinition, SuiteRecord
from assay.scoring.suites.loader import parse_suite
from assay.settings import get_settings
from tests.scoring.test_compare import H2, H, _batch, _score, add_noise

URL = "/api/v1/gate"
N = 20


SUITE = """
name: s1
kind: generic
threshold: 0.7
components:
  exact: {weight: 1.0, metric: exact_match, version: 1}
"""


def seed(candidate: list[float | str], *, candidate_hash: str = H) -> tuple[str, str]:
    """A baseline where every item passes at 0.9, and a candidate with the given totals, or a status
    (``failed``, ``pending``) for an item without one."""
    criteria = json.loads(parse_suite(SUITE, config_dir=get_settings().config_dir, env={}).criteria.canonical_json())
    with transaction() as session:
        for criteria_hash in (H, H2):
            session.add(CriteriaDefinition(criteria_hash=criteria_hash, criteria_content=criteria))
        session.add(SuiteRecord(name="s1", kind="generic", current_criteria_hash=H, options={}))
        session.flush()
        base, cand = _batch(session), _batch(session, candidate_hash)
        for n, total in enumerate(candidate):
            _score(session, base, f"e{n:02d}", 0.9, True)
            if isinstance(total, str):
                _score(session, cand, f"e{n:02d}", None, None, status=total, criteria_hash=candidate_hash)
            else:
                _score(session, cand, f"e{n:02d}", total, total >= 0.7, criteria_hash=candidate_hash)
    return str(base), str(cand)


def test_a_regression_fails_with_its_rules_and_failing_items(api_client):
    base, cand = seed(["failed"] + [0.2] * 11 + [0.9] * (N - 12))
    r = api_client.get(URL, params={"baseline": base, "candidate": cand})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["passed"] is False
    assert [f["rule"] for f in body["failures"]] == ["mcnemar", "max_drop"]
    assert body["overall"]["pass_to_fail"] == 12 and body["counts"]["candidate_not_usable"] == 1
    reasons = {i["external_id"]: i["reason"] for i in body["failing_items"]}
    assert reasons["e00"] == "pass→fail: failed" and reasons["e01"].startswith("pass→fail: failed: total 0.200")
    assert len(reasons) == 12


def test_a_drop_within_the_noise_floor_passes_and_beyond_the_max_drop_without_it_fails(api_client):
    base, cand = seed([0.85] * N)  # every item 0.05 lower, none flips
    r = api_client.get(URL, params={"baseline": base, "candidate": cand})
    assert [f["rule"] for f in r.json()["failures"]] == ["max_drop"]
    with transaction() as session:
        add_noise(session, H, {"__total__": 0.2})  # floor 1.96 · 0.2 · √(2/20) ≈ 0.124 > 0.05
    body = api_client.get(URL, params={"baseline": base, "candidate": cand}).json()
    assert body["passed"] is True and body["overall"]["noise_floor"] == pytest.approx(1.96 * 0.2 * (2 / N) ** 0.5)
    assert "within the judge's noise floor" in body["overall"]["notes"][0]
    # A tolerated drop passes without the floor too.
    assert api_client.get(URL, params={"baseline": base, "candidate": cand, "max_drop": 0.1}).json()["passed"] is True


def test_different_criteria_and_too_few_pairs_fail_with_the_reason(api_client):
    base, cand = seed([0.9] * N, candidate_hash=H2)
    body = api_client.get(URL, params={"baseline": base, "candidate": cand}).json()
    assert body["passed"] is False and body["failures"][0]["rule"] == "criteria_hash"
    assert H[:12] in body["failures"][0]["message"] and H2[:12] in body["failures"][0]["message"]


def test_mistakes_are_4xx_and_the_route_needs_a_key(api_client):
    base, cand = seed([0.9] * 3)
    too_few = api_client.get(URL, params={"baseline": base, "candidate": cand}).json()
    assert [f["rule"] for f in too_few["failures"]] == ["too_few_pairs"]
    assert api_client.get(URL, params={"baseline": base, "candidate": base}).status_code == 400
    missing = str(uuid.uuid4())
    r = api_client.get(URL, params={"baseline": base, "candidate": missing})
    assert r.status_code == 404 and missing in r.json()["message"]
    r = api_client.get(URL, params={"baseline": base, "candidate": cand, "by": "product"})
    assert r.status_code == 400 and "metadata.KEY" in r.json()["message"]
    assert api_client.get(URL, params={"baseline": base, "candidate": cand, "alpha": 2}).status_code == 422
    with TestClient(api_client.app) as anonymous:
        assert anonymous.get(URL, params={"baseline": base, "candidate": cand}).status_code == 401
