"""Judge components travelling in groups (one Celery message each), their calls made at once, through
a live worker."""

from __future__ import annotations

from tests.conftest import wait_for
from tests.workers.test_judge_resilience import judge_env, unique_items


def most_in_flight(calls: list[dict], latency: float) -> int:
    """The most calls the fake was answering at one moment (each takes ``latency`` from its arrival)."""
    starts = sorted(call["at"] for call in calls)
    return max(sum(1 for other in starts if start <= other < start + latency) for start in starts)


def test_a_groups_calls_go_out_at_once_and_each_item_is_judged_once(api_client, live_worker_factory, fake_judge):
    # Two task threads. The planner publishes 16 judge components as 2 groups of 8; a call takes 1.5 s.
    # Judged one after another, at most 2 calls (one per thread) would ever be in flight.
    latency = 1.5
    fake_judge.configure(latency=latency)
    live_worker_factory(judge_env(fake_judge, ASSAY_PLAN_CHUNK_SIZE="16"), concurrency=2)
    batch_id = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(16)).json()["batch_id"]

    def finished():  # type: ignore[no-untyped-def]
        view = api_client.get(f"/api/v1/batches/{batch_id}").json()
        return view if view["status"] == "completed" else None

    view = wait_for(finished, timeout=120, message="the batch to finish")
    assert view["progress"]["completed"] == 16 and view["progress"]["errored"] == 0
    calls = fake_judge.calls()
    assert len(calls["answered"]) == 16 and set(calls["answered"].values()) == {1}
    assert most_in_flight(calls["calls"], latency) >= 8, "a group's calls were not made at once"
    results = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"limit": 100}).json()["results"]
    judged = [score["components"]["llm_grading"] for score in results]
    assert len(judged) == 16 and {c["status"] for c in judged} == {"ok"}  # each landed, with its verdict
    assert all(score["cost_usd"] > 0 for score in results)  # and the usage of its call
