"""Judge components travelling in groups (one Celery message each), their calls made at once, through
a live worker."""

from __future__ import annotations

from tests.conftest import wait_for
from tests.workers.test_judge_resilience import judge_env, unique_items


def most_in_flight(calls: list[dict], latency: float) -> int:
    """The most calls the fake was answering at one moment (each takes ``latency`` from its arrival)."""
    starts = sorted(call["at"] for call in calls)
    return max(sum(1 for other in starts if start <= other < start + latency) for start in starts)


def judge_batch(api_client, fake_judge, items: int) -> list[dict]:  # type: ignore[no-untyped-def]
    """Score ``items`` KQL items; the fake's calls, once each item was judged once and landed."""
    posted = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(items))
    batch_id = posted.json()["batch_id"]

    def finished():  # type: ignore[no-untyped-def]
        view = api_client.get(f"/api/v1/batches/{batch_id}").json()
        return view if view["status"] == "completed" else None

    view = wait_for(finished, timeout=120, message="the batch to finish")
    assert view["progress"]["completed"] == items and view["progress"]["errored"] == 0
    calls = fake_judge.calls()
    assert len(calls["answered"]) == items and set(calls["answered"].values()) == {1}  # each judged once
    results = api_client.get(f"/api/v1/batches/{batch_id}/results", params={"limit": 100}).json()["results"]
    judged = [score["components"]["llm_grading"] for score in results]
    assert len(judged) == items and {c["status"] for c in judged} == {"ok"}  # each landed, with its verdict
    assert all(score["cost_usd"] > 0 for score in results)  # and the usage of its call
    return calls["calls"]


def most_in_flight_judging_two_groups(  # type: ignore[no-untyped-def]
    api_client, live_worker_factory, fake_judge, latency: float, call_slots: int
) -> int:
    """Two task threads judge 16 items, published by the planner as 2 groups of 8, with ``call_slots``
    calls in flight allowed; the most calls in flight at once (each judged once, and landed)."""
    fake_judge.configure(latency=latency)
    env = judge_env(fake_judge, ASSAY_PLAN_CHUNK_SIZE="16", ASSAY_JUDGE_CONCURRENCY=str(call_slots))
    live_worker_factory(env, concurrency=2)
    return most_in_flight(judge_batch(api_client, fake_judge, 16), latency * 0.9)


def test_a_groups_calls_go_out_at_once_and_each_item_is_judged_once(api_client, live_worker_factory, fake_judge):
    # Judged one after another, at most 2 calls (one per task) would ever be in flight.
    most = most_in_flight_judging_two_groups(api_client, live_worker_factory, fake_judge, latency=1.5, call_slots=16)
    assert most >= 8, "a group's calls were not made at once"


def test_the_call_slots_bound_the_calls_in_flight(api_client, live_worker_factory, fake_judge):
    most = most_in_flight_judging_two_groups(api_client, live_worker_factory, fake_judge, latency=0.5, call_slots=3)
    assert most == 3


def test_call_slots_are_taken_all_or_nothing_and_given_back():
    import threading

    from assay.workers.runtime import CallSlots

    slots = CallSlots(3)
    slots.take(2)
    took = threading.Event()
    waiter = threading.Thread(target=lambda: (slots.take(2), took.set()))
    waiter.start()
    assert not took.wait(0.3), "took 2 call slots with only 1 free"  # and holds none while it waits
    slots.take(1)  # the one free is still there for a task that needs only one
    slots.give(2)
    assert took.wait(5), "2 call slots given back, but the waiting task did not get them"
    waiter.join()
