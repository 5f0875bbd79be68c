"""Editing one of three judge rubrics re-pays only that rubric, end to end: a suite with three judge
components and a metric, registered through the API and scored by a live worker against the loopback
fake judge; the rubric edit is a new suite version, the dry run says one call per item (two carried
over), and the re-score makes exactly that one judge call per item."""

from __future__ import annotations

import json
import uuid

import yaml
from sqlalchemy import select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score, ScoreComponent
from tests.workers.test_end_to_end import wait_finished
from tests.workers.test_rescore_e2e import judge_env

SUITE = "carry_three_judges"
ITEMS = [
    {"id": f"q{n}", "input": f"What is {n} plus {n}?", "output": f"{2 * n}", "expected": f"{2 * n}"}
    for n in range(1, 4)
]


def rubric(aspect: str) -> dict:
    # The per-item prompt ends with the aspect, so each judge's calls have their own item key in the fake.
    return {
        "weight": 0.3,
        "judge": {
            "max_tokens": 512,
            "rubric": f"You grade the {aspect} of an answer to an arithmetic question.",
            "prompt": "Question: {{input}}\nReference: {{expected}}\nAnswer: {{output}}\nAspect: " + aspect,
            "verdict": {"type": "scale", "min": 1, "max": 5},
        },
    }


def suite(correctness_rubric: str | None = None) -> str:
    components = {
        "exact": {"weight": 0.1, "metric": "exact_match", "version": 1},
        "correctness": rubric("correctness"),
        "clarity": rubric("clarity"),
        "brevity": rubric("brevity"),
    }
    if correctness_rubric is not None:
        components["correctness"]["judge"]["rubric"] = correctness_rubric
    return yaml.safe_dump({"name": SUITE, "kind": "generic", "threshold": 0.5, "components": components}, sort_keys=False)


def register(api_client, body: str) -> str:
    r = api_client.post("/api/v1/suites", content=body.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    return r.json()["suite"]["current_criteria_hash"]


def components_of(batch_id: str) -> dict[tuple[str, str], tuple[str, str | None, float]]:
    """(external id, component) -> (status, carried_over_from, cost) of a batch's scores."""
    with transaction() as s:
        rows = s.execute(
            select(Item.external_id, ScoreComponent.component, ScoreComponent.status, ScoreComponent.carried_over_from, ScoreComponent.cost_usd)
            .join(Score, Score.id == ScoreComponent.score_id)
            .join(Item, Item.id == Score.item_id)
            .where(Score.batch_id == uuid.UUID(batch_id))
        ).all()
    return {(r.external_id, r.component): (r.status, str(r.carried_over_from) if r.carried_over_from else None, r.cost_usd) for r in rows}


def test_editing_one_of_three_rubrics_costs_one_judge_call_per_item(api_client, live_worker_factory, fake_judge):
    first_hash = register(api_client, suite())
    live_worker_factory(judge_env(fake_judge))
    body = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post(f"/api/v1/batches?suite={SUITE}", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    first = r.json()["batch_id"]
    assert wait_finished(api_client, first)["status"] == "completed"
    assert fake_judge.calls()["total"] == 3 * len(ITEMS), "three judge components: three calls per item"

    second_hash = register(api_client, suite("You grade the correctness of an answer; be strict about units."))
    assert second_hash != first_hash
    dry = api_client.post("/api/v1/rescore", json={"suite": SUITE, "dry_run": True})
    assert dry.status_code == 200, dry.text
    estimate = dry.json()["estimate"]
    assert (estimate["items"], estimate["judge_calls"], estimate["carried_over"]) == (3, 3, 6)
    assert estimate["cost_usd"] > 0

    run = api_client.post("/api/v1/rescore", json={"suite": SUITE})
    assert run.status_code == 202, run.text
    run_id = run.json()["batch_id"]
    view = wait_finished(api_client, run_id)
    assert view["status"] == "completed" and view["criteria_hash"] == second_hash
    assert fake_judge.calls()["total"] == 4 * len(ITEMS), "only the edited rubric was asked again"

    before, after = components_of(first), components_of(run_id)
    with transaction() as s:
        first_scores = {str(i) for i in s.scalars(select(Score.id).where(Score.batch_id == uuid.UUID(first)))}
    assert len(after) == 4 * len(ITEMS)
    for (external_id, name), (status, carried, cost) in after.items():
        assert status == "ok"
        if name == "correctness":
            assert carried is None and cost > 0
        else:
            assert carried in first_scores and cost == 0
            assert before[(external_id, name)][0] == "ok"
    results = api_client.get(f"/api/v1/batches/{run_id}/results").json()["results"]
    assert {r["status"] for r in results} == {"completed"}
    assert all(r["components"]["clarity"]["carried_over_from"] for r in results)
    assert all(r["components"]["correctness"]["carried_over_from"] is None for r in results)
