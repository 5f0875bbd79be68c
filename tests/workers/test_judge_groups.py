"""Judge components travelling in groups (one Celery message each), through a live worker."""

from __future__ import annotations

import threading

import psycopg

from tests.conftest import TEST_ENV, wait_for
from tests.workers.test_judge_resilience import judge_env, unique_items


def test_a_group_that_outlives_its_lease_renews_it_and_judges_each_item_once(
    api_client, live_worker_factory, fake_judge
):
    # The planner's first chunk of 16 judge components goes out in 4 groups of 4 (4 worker threads;
    # the batch's last chunk goes one per message). A call takes 1.2 s, so a group's last component
    # waits 3.6 s for its turn and is judged until 4.8 s after the claim: past a 3 s lease, unless the
    # group renews the leases of those still waiting (renewing only the next one is not enough).
    fake_judge.configure(latency=1.2)
    live_worker_factory(
        judge_env(fake_judge, ASSAY_JUDGE_LEASE_SECONDS="3", ASSAY_PLAN_CHUNK_SIZE="16"), concurrency=4
    )
    overdue: list[int] = []
    held_by_one_task: list[int] = []  # the most judge components one task held at once: groups did form
    done = threading.Event()

    def watch_leases() -> None:
        url = TEST_ENV["ASSAY_DATABASE_URL"].replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(url, autocommit=True) as conn:
            while not done.is_set():
                (n,) = conn.execute(
                    "SELECT count(*) FROM score_components WHERE queue = 'judge' AND status = 'in_progress'"
                    " AND lease_expires_at < now() - interval '100 milliseconds'"
                ).fetchone()
                overdue.append(n)
                (most,) = conn.execute(
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM score_components"
                    " WHERE queue = 'judge' AND status = 'in_progress' GROUP BY lease_owner) AS held"
                ).fetchone()
                held_by_one_task.append(most)
                done.wait(0.05)

    watcher = threading.Thread(target=watch_leases, daemon=True)
    watcher.start()
    try:
        batch_id = api_client.post("/api/v1/batches", params={"suite": "kql"}, content=unique_items(32)).json()["batch_id"]

        def finished():  # type: ignore[no-untyped-def]
            view = api_client.get(f"/api/v1/batches/{batch_id}").json()
            return view if view["status"] == "completed" else None

        view = wait_for(finished, timeout=120, message="the batch to finish")
    finally:
        done.set()
        watcher.join(timeout=5)
    assert view["progress"]["completed"] == 32 and view["progress"]["errored"] == 0
    calls = fake_judge.calls()
    assert len(calls["answered"]) == 32 and set(calls["answered"].values()) == {1}
    assert max(held_by_one_task) == 4, "the first chunk's judge components were not judged in groups of 4"
    assert len(overdue) > 20 and max(overdue) == 0, "a judge component was held past its lease"
