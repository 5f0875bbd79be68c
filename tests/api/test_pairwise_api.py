"""The pairwise routes around a run's batch, without a worker: the run's pairs are planned, claimed and
landed in this process as a judge's verdicts would land (a verdict per order, with a cost), so the
report, the budget cut, cancel and resume go through the pipeline's own functions.

- a finished run's report names the pair's item and the two compared items of each pair that moved;
- cancel drops the queued pairs, ends the run without a report, and cannot be repeated (409);
- a run the budget stopped is ``completed`` with the pairs judged; resume (budget above the spend)
  makes it ``running`` again, without a report, hands its stopped pairs back to the workers, and the
  report is made afresh when they land;
- the mistakes: an unknown run (404), a run whose batch is running (409 to resume), a budget not above
  the spend (400), a deleted batch (409).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
import yaml

import assay.scoring.features  # noqa: F401  (this process lands scores: the run's report is a feature's hook)
from assay.scoring.kinds.pairwise import A_FIRST
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.budgets import stop_for_budget
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.landing import land
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score
from tests.scoring.test_pipeline import plan_all

SUITE = "pairwise_api"
# B's share of a pair for the verdict label of an order (a_first shows A first, b_first B first).
SHARE = {(A_FIRST, "a"): 0.0, (A_FIRST, "b"): 1.0, ("b_first", "a"): 1.0, ("b_first", "b"): 0.0}


def suite_yaml() -> bytes:
    return yaml.safe_dump(
        {
            "name": SUITE,
            "kind": "generic",
            "threshold": 0.5,
            "components": {"exact": {"weight": 1.0, "metric": "exact_match", "version": 1}},
            "pairwise": {"rubric": "Which answer is more helpful?", "max_tokens": 64},
        }
    ).encode()


@pytest.fixture
def planners(monkeypatch) -> list:
    """No worker: the planner and the published work are recorded, the test does the work itself."""
    calls: list = []
    monkeypatch.setattr("assay.api.routes.pairwise.start_planner", lambda batch_id: calls.append(("plan", batch_id)))
    monkeypatch.setattr("assay.api.routes.pairwise.publish_components", lambda refs: calls.append(("publish", list(refs))))
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    return calls


def upload(client, outputs: dict[str, str], suite: str = SUITE) -> str:
    body = "".join(
        json.dumps({"id": ext, "input": f"question {ext}", "output": out, "expected": "x", "metadata": {"topic": ext[:1]}}) + "\n"
        for ext, out in outputs.items()
    )
    r = client.post(f"/api/v1/batches?suite={suite}", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    return r.json()["batch_id"]


def two_batches(client, n: int = 4) -> tuple[str, str]:
    r = client.post("/api/v1/suites", content=suite_yaml(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    ids = [f"q{k}" for k in range(n)]
    return upload(client, {i: f"A answers {i}" for i in ids}), upload(client, {i: f"B answers {i} [BEST]" for i in ids})


def preferring(winner: Callable[[str, str], str]) -> Callable[[ComponentRef], ComponentResult]:
    """A judge's verdict per order (cost $0.01 each) from ``winner(output_a, output_b)``: "a", "b" or
    "tie", whatever the order the outputs are shown in."""

    def verdict(ref: ComponentRef) -> ComponentResult:
        with transaction() as s:
            payload = s.get(Item, s.get(Score, ref.score_id).item_id).payload
        better = winner(payload["output_a"], payload["output_b"])
        label = better if ref.component == A_FIRST or better == "tie" else {"a": "b", "b": "a"}[better]
        share = 0.5 if label == "tie" else SHARE[(ref.component, label)]
        return ComponentResult("ok", share, {"label": label, "reasoning": f"{better} is better"}, cost_usd=0.01)

    return verdict


def _marker(a: str, b: str) -> str:
    return "tie" if ("[BEST]" in a) == ("[BEST]" in b) else ("b" if "[BEST]" in b else "a")


marker_verdict = preferring(_marker)
longer_verdict = preferring(lambda a, b: "tie" if len(a) == len(b) else ("b" if len(b) > len(a) else "a"))


def judge(refs: list[ComponentRef], verdict: Callable[[ComponentRef], ComponentResult] = marker_verdict) -> int:
    """Claim and land each order as a judge worker would (budget checked first); returns how many
    were stopped by the budget."""
    stopped = 0
    for ref in refs:
        with transaction() as s:
            got = claim(s, ref, "test", 60, check_budget=True)
            if got.state != "claimed":
                continue
            if got.budget_spent:
                stop_for_budget(s, ref, "test")
                stopped += 1
                continue
        with transaction() as s:
            land(s, ref, verdict(ref))
    return stopped


def start_run(client, a: str, b: str, **body) -> dict:
    r = client.post("/api/v1/pairwise", json={"suite": SUITE, "batches": [a, b], "labels": ["A", "B"], **body})
    assert r.status_code == 202, r.text
    return r.json()["run"]


def test_a_finished_run_links_the_pairs_that_moved_to_their_items(api_client, planners):
    a, b = two_batches(api_client)
    run = start_run(api_client, a, b)
    assert ("plan", uuid.UUID(run["batch_id"])) in planners
    judge(plan_all(uuid.UUID(run["batch_id"])))
    view = api_client.get(f"/api/v1/pairwise/{run['id']}").json()
    assert view["status"] == "completed" and view["progress"]["completed"] == 4
    (h2h,) = view["report"]["head_to_head"]
    assert (h2h["wins"], h2h["ties"], h2h["losses"]) == (4, 0, 0)
    moved = view["report"]["moved_most"]
    assert [m["external_id"] for m in moved] == ["q0", "q1", "q2", "q3"]
    with transaction() as s:
        for m in moved:
            pair = s.get(Item, uuid.UUID(m["pair_item_id"]))
            assert pair.kind == "pairwise" and pair.payload["id"] == m["external_id"]
            assert (pair.payload["a"]["item_id"], pair.payload["b"]["item_id"]) == (m["a_item_id"], m["b_item_id"])
            assert s.get(Item, uuid.UUID(m["a_item_id"])).payload["output"] == f"A answers {m['external_id']}"


def test_cancel_drops_the_queued_pairs_and_ends_the_run_without_a_report(api_client, planners):
    a, b = two_batches(api_client)
    run = start_run(api_client, a, b)
    refs = plan_all(uuid.UUID(run["batch_id"]))
    judge(refs[:2])  # one pair judged in both orders, three still queued
    r = api_client.post(f"/api/v1/pairwise/{run['id']}/cancel")
    assert r.status_code == 200, r.text
    view = r.json()
    assert (view["status"], view["batch_status"], view["report"]) == ("cancelled", "cancelled", None)
    assert (view["progress"]["completed"], view["progress"]["cancelled"]) == (1, 3)
    assert api_client.get(f"/api/v1/pairwise/{run['id']}").json()["status"] == "cancelled"
    again = api_client.post(f"/api/v1/pairwise/{run['id']}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["message"]


def test_a_run_the_budget_stopped_resumes_and_reports_again(api_client, planners):
    a, b = two_batches(api_client)
    # Each order costs $0.01: the first pair's two orders spend the $0.015 budget, the rest are stopped.
    run = start_run(api_client, a, b, budget_usd=0.015)
    refs = plan_all(uuid.UUID(run["batch_id"]))
    assert judge(refs) >= 1
    stopped = api_client.get(f"/api/v1/pairwise/{run['id']}").json()
    assert (stopped["status"], stopped["batch_status"]) == ("completed", "budget_exhausted")
    assert stopped["report"]["pairs"]["judged"] == 1 and stopped["report"]["pairs"]["incomplete"] == 3

    low = api_client.post(f"/api/v1/pairwise/{run['id']}/resume", json={"budget_usd": 0.01})
    assert low.status_code == 400 and "must exceed what the batch has spent" in low.json()["message"]
    r = api_client.post(f"/api/v1/pairwise/{run['id']}/resume", json={"budget_usd": 1.0})
    assert r.status_code == 200, r.text
    resumed = r.json()
    assert (resumed["status"], resumed["batch_status"], resumed["budget_usd"], resumed["report"]) == ("running", "running", 1.0, None)
    (published,) = [refs for what, refs in planners if what == "publish"]
    assert len(published) == 6  # the three stopped pairs, both orders each
    twice = api_client.post(f"/api/v1/pairwise/{run['id']}/resume", json={"budget_usd": 2.0})
    assert twice.status_code == 409 and "only a budget_exhausted batch can be resumed" in twice.json()["message"]

    judge(published)
    done = api_client.get(f"/api/v1/pairwise/{run['id']}").json()
    assert (done["status"], done["batch_status"]) == ("completed", "completed")
    assert done["report"]["pairs"] == {"judged": 4, "incomplete": 0}
    assert done["report"]["head_to_head"][0]["wins"] == 4


def test_a_run_resumed_through_its_batch_is_running_again(api_client, planners):
    """`assay resume BATCH` (the batch route) resumes a pairwise run's batch too: the run reads as
    running, with no report of the cut, until its batch finishes again."""
    a, b = two_batches(api_client)
    run = start_run(api_client, a, b, budget_usd=0.015)
    judge(plan_all(uuid.UUID(run["batch_id"])))
    r = api_client.post(f"/api/v1/batches/{run['batch_id']}/resume", json={"budget_usd": 1.0})
    assert r.status_code == 200, r.text
    view = api_client.get(f"/api/v1/pairwise/{run['id']}").json()
    assert (view["status"], view["report"]) == ("running", None)


def test_mistakes_are_clear_4xx(api_client, planners):
    missing = uuid.uuid4()
    for action, body in (("cancel", None), ("resume", {"budget_usd": 1.0})):
        r = api_client.post(f"/api/v1/pairwise/{missing}/{action}", json=body)
        assert r.status_code == 404 and f"no pairwise run {missing}" in r.json()["message"]
    assert api_client.post("/api/v1/pairwise/not-a-uuid/cancel").status_code == 422
    a, b = two_batches(api_client)
    run = start_run(api_client, a, b)
    r = api_client.post(f"/api/v1/pairwise/{run['id']}/resume", json={"budget_usd": 0})
    assert r.status_code == 422 and "budget_usd" in r.text
    r = api_client.post(f"/api/v1/pairwise/{run['id']}/resume", json={})
    assert r.status_code == 409 and "planning" in r.json()["message"]
    assert api_client.delete(f"/api/v1/batches/{run['batch_id']}").status_code == 204
    r = api_client.post(f"/api/v1/pairwise/{run['id']}/cancel")
    assert r.status_code == 409 and "batch was deleted" in r.json()["message"]
