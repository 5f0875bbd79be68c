"""Pairwise runs end to end with a live worker and the loopback fake judge scripted to prefer a position,
a marker or the longer output (known answers):

- a judge that always picks the first position gives only ties and a position-inconsistency rate of 1;
- a judge that prefers the output holding a marker gives the win rate the outputs were designed for,
  per slice too, and a second run under the same pairwise criteria carries every judgment over;
- a judge that prefers the longer output ranks four systems, built one longer than the other, in
  their designed order on the Bradley-Terry leaderboard;
- the pairwise rubric has its own hash: the run leaves the suite's criteria and its items alone (the
  re-score finds nothing stale).
"""

from __future__ import annotations

import json

import yaml

from tests.conftest import wait_for
from tests.workers.test_end_to_end import wait_finished
from tests.workers.test_rescore_e2e import judge_env

SUITE = "pairwise_e2e"
MARKER = "[BEST]"


def suite_body(rubric: str = "Which answer is more helpful?") -> bytes:
    return yaml.safe_dump(
        {
            "name": SUITE,
            "kind": "generic",
            "threshold": 0.5,
            "components": {"exact": {"weight": 1.0, "metric": "exact_match", "version": 1}},
            "pairwise": {"rubric": rubric, "max_tokens": 256},
        },
        sort_keys=False,
    ).encode()


def register_suite(api_client, rubric: str = "Which answer is more helpful?") -> str:
    r = api_client.post("/api/v1/suites", content=suite_body(rubric), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    return api_client.get(f"/api/v1/suites/{SUITE}").json()["current_criteria_hash"]


def submit(api_client, outputs: dict[str, str], metadata: dict[str, dict] | None = None) -> str:
    lines = [
        {"id": ext, "input": f"question {ext}", "output": out, "expected": "x", **({"metadata": metadata[ext]} if metadata else {})}
        for ext, out in outputs.items()
    ]
    body = "".join(json.dumps(line) + "\n" for line in lines)
    r = api_client.post(f"/api/v1/batches?suite={SUITE}", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    assert wait_finished(api_client, batch_id)["status"] == "completed"
    return batch_id


def run_pairwise(api_client, **body) -> dict:
    r = api_client.post("/api/v1/pairwise", json={"suite": SUITE, **body})
    assert r.status_code == 202, r.text
    location = r.headers["location"]

    def finished():  # type: ignore[no-untyped-def]
        view = api_client.get(location).json()
        return view if view["status"] != "running" else None

    return wait_for(finished, timeout=120, message="the pairwise run to finish")


def test_a_position_biased_judge_gives_only_ties_and_inconsistency_one(api_client, live_worker_factory, fake_judge):
    suite_hash = register_suite(api_client)
    live_worker_factory(judge_env(fake_judge))
    ids = [f"q{n}" for n in range(6)]
    a = submit(api_client, {i: f"answer A to {i}" for i in ids})
    b = submit(api_client, {i: f"a much better answer B to {i}" for i in ids})
    fake_judge.reset()
    fake_judge.configure(pairwise_preference="first")

    dry = api_client.post("/api/v1/pairwise", json={"suite": SUITE, "batches": [a, b], "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert (dry.json()["estimate"]["items"], dry.json()["estimate"]["judge_calls"], dry.json()["run"]) == (6, 12, None)
    assert api_client.get("/api/v1/pairwise").json()["runs"] == []  # a dry run keeps nothing

    view = run_pairwise(api_client, batches=[a, b], labels=["A", "B"])
    assert view["status"] == "completed" and view["criteria_hash"] != suite_hash
    assert fake_judge.calls()["total"] == 12  # each pair in both orders
    (h2h,) = view["report"]["head_to_head"]
    assert (h2h["a"], h2h["b"], h2h["wins"], h2h["ties"], h2h["losses"]) == ("A", "B", 0, 6, 0)
    assert h2h["inconsistency_rate"] == 1.0 and h2h["win_rate"] == 0.5 and h2h["sign_test_p"] == 1.0
    assert view["report"]["moved_most"] == [] and view["report"]["leaderboard"] is None

    # The pairs live outside the suite: the nightly re-score finds nothing stale and its hash is unchanged.
    rescore = api_client.post("/api/v1/rescore", json={"suite": SUITE, "dry_run": True})
    assert rescore.status_code == 200, rescore.text
    assert rescore.json()["estimate"]["items"] == 0
    # Editing the pairwise rubric leaves the suite's criteria hash as it is.
    assert register_suite(api_client, rubric="Which answer is more correct?") == suite_hash


def test_a_marker_preferring_judge_gives_the_designed_win_rate_and_carries_over(api_client, live_worker_factory, fake_judge):
    register_suite(api_client)
    live_worker_factory(judge_env(fake_judge))
    # B holds the marker on 7 items, A on 2, neither on 1: B wins 7, loses 2, ties 1 -> (7 + 0.5) / 10.
    ids = [f"q{n}" for n in range(10)]
    topic = {i: {"topic": "math" if n < 5 else "prose"} for n, i in enumerate(ids)}
    a = submit(api_client, {i: f"A {i}" + (f" {MARKER}" if n in (7, 8) else "") for n, i in enumerate(ids)}, topic)
    b = submit(api_client, {i: f"B {i}" + (f" {MARKER}" if n < 7 else "") for n, i in enumerate(ids)}, topic)
    fake_judge.reset()
    fake_judge.configure(pairwise_preference="marker", pairwise_marker=MARKER)

    view = run_pairwise(api_client, batches=[a, b], by="metadata.topic")
    (h2h,) = view["report"]["head_to_head"]
    assert (h2h["wins"], h2h["ties"], h2h["losses"], h2h["inconsistent"]) == (7, 1, 2, 0)
    assert h2h["win_rate"] == 0.75 and h2h["win_rate_low"] < 0.75 < h2h["win_rate_high"]
    assert 0 < h2h["sign_test_p"] < 0.2
    slices = {s["value"]: s for s in view["report"]["slices"]["values"]}
    assert (slices["math"]["wins"], slices["prose"]["wins"], slices["prose"]["losses"]) == (5, 2, 2)
    moved = view["report"]["moved_most"]
    assert [m["external_id"] for m in moved[:2]] == ["q7", "q8"]  # B's losses first
    assert len(moved) == 9
    paid = fake_judge.calls()["total"]
    assert paid == 20

    again = run_pairwise(api_client, batches=[a, b])
    assert again["criteria_hash"] == view["criteria_hash"]
    assert fake_judge.calls()["total"] == paid  # every pair carried over: nothing paid twice
    assert again["report"]["head_to_head"] == view["report"]["head_to_head"]


def test_bradley_terry_recovers_the_designed_order_of_four_systems(api_client, live_worker_factory, fake_judge):
    register_suite(api_client)
    live_worker_factory(judge_env(fake_judge))
    ids = [f"q{n}" for n in range(5)]
    # System k answers with k + 1 sentences: a judge preferring the longer output orders them 3 > 2 > 1 > 0.
    batches = [submit(api_client, {i: " ".join([f"Sentence about {i}."] * (k + 1)) for i in ids}) for k in range(4)]
    fake_judge.reset()
    fake_judge.configure(pairwise_preference="longer")

    view = run_pairwise(api_client, batches=batches, labels=["one", "two", "three", "four"])
    assert view["design"]["rule"] == "all pairs" and view["design"]["pairs"] == 5 * 6
    assert fake_judge.calls()["total"] == 5 * 6 * 2
    board = view["report"]["leaderboard"]
    assert [s["label"] for s in board["systems"]] == ["four", "three", "two", "one"]
    assert [s["rank"] for s in board["systems"]] == [1, 2, 3, 4]
    assert board["resampled"] == "items" and board["resamples"] > 0
    strengths = [s["strength"] for s in board["systems"]]
    assert all(x > y for x, y in zip(strengths, strengths[1:]))
    assert all(s["low"] <= s["strength"] <= s["high"] for s in board["systems"])
    assert len(view["report"]["head_to_head"]) == 6
