"""The judge's noise floor end to end: a generic suite (an exact-match metric and a 1-5 scale judge,
half each) scored once by a live worker against the loopback fake judge, then calibrated with the
fake's ``repeat_spread`` set so every repeat moves the judge by a known amount.

With ``repeat_spread=0.5`` the fake answers a 1-5 scale 3 + 2, 3 - 2, 3 + 2, ... (the base pulled to 3
so ±2 stays in range): the judge component scores 1, 0, 1 (normalised (v - 1) / 4) for every item.
With K = 3 each item's sample variance is var([1, 0, 1], ddof=1) = 1/3, so σw(judge) = sqrt(1/3) and
σw(total) = 0.5 · sqrt(1/3) (the metric is 1.0 every time, carried over). The total is 1.0 or 0.5
against a 0.75 threshold: every item flips. The suite sends every machine score to the review queue
(``random_share: 1``); the repeats never enter it.
"""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest
import yaml
from sqlalchemy import select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import ReviewQueueEntry, Score, ScoreComponent
from tests.conftest import wait_for
from tests.workers.test_end_to_end import wait_finished
from tests.workers.test_rescore_e2e import judge_env

SUITE = "calibrated_scale"
ITEMS = [{"id": f"q{n}", "input": f"What is {n} times 3?", "output": f"{3 * n}", "expected": f"{3 * n}"} for n in range(1, 5)]
SUITE_BODY = yaml.safe_dump(
    {
        "name": SUITE,
        "kind": "generic",
        "threshold": 0.75,
        # Every finalized machine score enters the review queue; no calibration repeat may.
        "review": {"random_share": 1.0},
        "components": {
            "exact": {"weight": 0.5, "metric": "exact_match", "version": 1},
            "quality": {
                "weight": 0.5,
                "judge": {
                    "max_tokens": 512,
                    "rubric": "You grade an answer to an arithmetic question.",
                    "prompt": "Question: {{input}}\nReference: {{expected}}\nAnswer: {{output}}",
                    "verdict": {"type": "scale", "min": 1, "max": 5},
                },
            },
        },
    },
    sort_keys=False,
)


def test_calibration_measures_the_fakes_known_spread(api_client, live_worker_factory, fake_judge):
    r = api_client.post("/api/v1/suites", content=SUITE_BODY.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    live_worker_factory(judge_env(fake_judge))
    body = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post(f"/api/v1/batches?suite={SUITE}", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    machine_batch = r.json()["batch_id"]
    assert wait_finished(api_client, machine_batch)["status"] == "completed"
    assert fake_judge.calls()["total"] == len(ITEMS)

    fake_judge.reset()
    fake_judge.configure(repeat_spread=0.5)
    dry = api_client.post(f"/api/v1/suites/{SUITE}/calibrations", json={"sample": 10, "repeats": 3, "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert (dry.json()["estimate"]["judge_calls"], dry.json()["sample"]) == (3 * len(ITEMS), len(ITEMS))
    r = api_client.post(f"/api/v1/suites/{SUITE}/calibrations", json={"sample": 10, "repeats": 3})
    assert r.status_code == 202, r.text
    location = r.headers["location"]

    def finished():  # type: ignore[no-untyped-def]
        view = api_client.get(location).json()
        return view if view["status"] != "running" else None

    view = wait_for(finished, timeout=90, message="the calibration run to finish")
    assert view["status"] == "completed" and view["batch_status"] == "completed", view
    assert fake_judge.calls()["total"] == 3 * len(ITEMS), "every repeat asked the judge again"

    # The stored numbers against the docstring's, and against numpy over what the repeats stored.
    with transaction() as s:
        rows = s.execute(
            select(Score.item_id, ScoreComponent.component, ScoreComponent.score, ScoreComponent.carried_over_from)
            .join(ScoreComponent, ScoreComponent.score_id == Score.id)
            .where(Score.calibration_run_id == uuid.UUID(view["id"]))
        ).all()
    judged: dict[uuid.UUID, list[float]] = {}
    for row in rows:
        if row.component == "quality":
            judged.setdefault(row.item_id, []).append(row.score)
            assert row.carried_over_from is None
        else:
            assert row.carried_over_from is not None and row.score == 1.0
    assert len(judged) == len(ITEMS) and all(sorted(values) == [0.0, 1.0, 1.0] for values in judged.values())
    expected = float(np.sqrt(np.mean([np.var(v, ddof=1) for v in judged.values()])))
    assert expected == pytest.approx(math.sqrt(1 / 3))

    noise = view["noise"]
    assert noise["sigma_w"] == {"quality": pytest.approx(math.sqrt(1 / 3), abs=1e-6)}
    assert noise["sigma_w_total"] == pytest.approx(0.5 * math.sqrt(1 / 3), abs=1e-6)
    assert noise["flip_share"] == 1.0 and noise["items"] == len(ITEMS) and noise["repeats"] == 3

    listed = api_client.get(f"/api/v1/suites/{SUITE}/noise").json()
    assert [n["calibration_run_id"] for n in listed["noise"]] == [view["id"]]

    # The repeats stay out of machine verdicts: the calibration batch has none, the items show one score.
    summary = api_client.get(f"/api/v1/batches/{view['batch_id']}").json()
    assert summary["status"] == "completed"
    results = api_client.get(f"/api/v1/batches/{machine_batch}/results").json()["results"]
    item = api_client.get(f"/api/v1/items/{results[0]['item_id']}").json()
    assert len(item["scores"]) == 1
    with transaction() as s:
        queued = set(s.scalars(select(ReviewQueueEntry.score_id)))
        machine = set(s.scalars(select(Score.id).where(Score.batch_id == uuid.UUID(machine_batch))))
    assert queued == machine and len(queued) == len(ITEMS)
