"""Fault tests: a batch survives a worker SIGKILL, an empty Redis restart, a Postgres restart, and an API
killed mid-upload leaves nothing behind.

Each runs on PRIVATE instances (``conftest.py``): its own ``redis-server`` as broker and breaker store,
and for the Postgres test its own cluster; the API, workers and ``celery beat`` (the reconciler) are
subprocesses on that private stack. Each ends with every item scored exactly once (one completed score
row per item, every component landed once, the batch completed with ``finished_items == total_items``)
and no judge call repeated for a component that had already landed: every item's prompt is unique, so
the fake judge counts calls per item.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg

from tests.conftest import TEST_DB, TEST_ENV, wait_for
from tests.faults.conftest import (
    ApiServer,
    PostgresCluster,
    Processes,
    RedisServer,
    assert_scored_exactly_once,
    jsonl,
    judge_calls_in_flight,
    judge_counts,
    kql_items,
    plain_pg_url,
    repeated_calls,
    scores_landed,
    stack_env,
    submit,
    wait_batch_finished,
)

N_ITEMS = 200
COMPONENTS = 4  # schema_match, semantic_similarity, results_match (metrics queue) + llm_grading (judge queue)


def _judge_components(db_url: str, batch_id: str) -> dict[str, int]:
    with psycopg.connect(plain_pg_url(db_url)) as conn:
        return dict(
            conn.execute(
                "SELECT c.status, count(*) FROM score_components c JOIN scores s ON s.id = c.score_id "
                "WHERE s.batch_id = %s AND c.component = 'llm_grading' GROUP BY c.status",
                (batch_id,),
            ).fetchall()
        )


def _api_view(api: ApiServer, batch_id: str) -> dict[str, Any]:
    with api.client() as http:
        r = http.get(f"/api/v1/batches/{batch_id}")
        assert r.status_code == 200, r.text
        return r.json()


def _assert_view_complete(view: dict[str, Any], n: int) -> None:
    assert view["status"] == "completed", view
    progress = view["progress"]
    assert progress["done"] == n and progress["completed"] == n and progress["errored"] == 0, progress


def test_worker_sigkill_mid_batch(clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer) -> None:
    """SIGKILL a worker mid-batch, start another: what it held (unacked messages, leased components) is
    recovered by the visibility timeout and the reconciler, and only its unlanded judge calls are redone."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    env = stack_env(
        private_redis,
        fake_judge.base_url,
        # Unacked messages of the dead worker come back after the visibility timeout; leases it held
        # expire quickly so the reconciler (beat, every 5 s) re-enqueues them. A lease still outlives
        # a judge call (~50 ms) by far, and stays below the visibility timeout, as the app requires.
        ASSAY_VISIBILITY_TIMEOUT_SECONDS="10",
        ASSAY_JUDGE_LEASE_SECONDS="8",
        ASSAY_METRICS_LEASE_SECONDS="8",
    )
    api = ApiServer(procs, env).start()
    procs.beat(env)
    first = procs.worker(env)
    with api.client() as http:
        batch_id = submit(http, jsonl(kql_items(N_ITEMS)))

    wait_for(lambda: scores_landed(db_url, batch_id) >= N_ITEMS // 4, timeout=90, message="a quarter of the items to land")
    with judge_calls_in_flight(fake_judge, latency=1.0):
        first.kill()  # SIGKILL to the worker's whole process group, mid-batch, judge calls in flight
        time.sleep(1.0)  # let Postgres and the fake take in whatever the dead worker had already sent
    at_kill = _judge_components(db_url, batch_id)
    landed_at_kill = at_kill.get("ok", 0)
    called_before = judge_counts(fake_judge)
    assert scores_landed(db_url, batch_id) < N_ITEMS, "the batch finished before the kill: make it bigger"
    assert set(called_before.values()) <= {1}, "a judge call was repeated before any fault"

    procs.worker(env)
    assert wait_batch_finished(db_url, batch_id, timeout=150) == ("completed", N_ITEMS, N_ITEMS)
    assert_scored_exactly_once(db_url, batch_id, N_ITEMS, COMPONENTS)
    _assert_view_complete(_api_view(api, batch_id), N_ITEMS)

    counts = judge_counts(fake_judge)
    assert len(counts) == N_ITEMS, "one judge item key per item"
    # Items first judged after the kill were judged once.
    assert {counts[k] for k in counts.keys() - called_before.keys()} <= {1}
    # Items judged before the kill: those whose judgment had landed kept their single call; only the
    # ones in flight when the worker died (called, never landed) were called once more.
    once = [k for k in called_before if counts[k] == 1]
    again = [k for k in called_before if counts[k] != 1]
    assert len(once) == landed_at_kill, (len(once), landed_at_kill, at_kill)
    assert {counts[k] for k in again} <= {2}
    assert len(again) == len(called_before) - landed_at_kill
    assert len(again) >= 2 and at_kill.get("in_progress", 0) >= 2, "the kill was meant to catch judge calls in flight"
    print(f"[faults] sigkill: judge components at kill {at_kill}; called before {len(called_before)}, redone {len(again)}")


def test_redis_restarted_empty_mid_batch(clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer) -> None:
    """The broker (and breaker store) is SIGKILLed and comes back EMPTY mid-batch: the worker reconnects
    and consumes again, the reconciler re-enqueues the lost messages, and nothing is judged twice."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    env = stack_env(private_redis, fake_judge.base_url)
    api = ApiServer(procs, env).start()
    beat = procs.beat(env)
    worker = procs.worker(env)
    with api.client() as http:
        batch_id = submit(http, jsonl(kql_items(N_ITEMS)))

    wait_for(lambda: scores_landed(db_url, batch_id) >= N_ITEMS // 4, timeout=90, message="a quarter of the items to land")
    # Judge calls are in flight when Redis dies and are answered while it is down (1.5 s): the answers
    # must still land (they are paid for), whatever happens to the breaker's and governor's bookkeeping.
    with judge_calls_in_flight(fake_judge, latency=1.0):
        private_redis.restart_empty(down_seconds=1.5)
    assert scores_landed(db_url, batch_id) < N_ITEMS, "the batch finished before the restart: make it bigger"

    assert wait_batch_finished(db_url, batch_id, timeout=150) == ("completed", N_ITEMS, N_ITEMS)
    assert worker.alive() and beat.alive(), "the worker and beat must ride out the broker restart"
    assert_scored_exactly_once(db_url, batch_id, N_ITEMS, COMPONENTS)
    _assert_view_complete(_api_view(api, batch_id), N_ITEMS)
    # The same worker consumed again from the new, empty server (it reconnected; nothing re-declared
    # by hand): everything the restart lost was re-enqueued there by the reconciler and consumed.
    assert worker.text().count("Connected to redis://") >= 2, worker.tail()
    counts = judge_counts(fake_judge)
    # A repeat here means a judge answer that had been received (paid for) was thrown away because
    # the breaker/governor bookkeeping on the dead Redis raised after the call, and was paid for again.
    assert len(counts) == N_ITEMS and set(counts.values()) == {1}, f"judge calls repeated: {repeated_calls(fake_judge)}"


def test_postgres_restarted_mid_batch(
    fake_judge: Any, procs: Processes, private_redis: RedisServer, private_postgres: PostgresCluster
) -> None:
    """The store goes down for a few seconds mid-batch (fast shutdown, then start): tasks retry their
    store writes, landings in flight survive, and the batch completes with nothing judged twice."""
    db_url = private_postgres.url("assay")
    env = stack_env(private_redis, fake_judge.base_url, ASSAY_DATABASE_URL=db_url)
    api = ApiServer(procs, env).start()
    procs.beat(env)
    worker = procs.worker(env)
    with api.client() as http:
        batch_id = submit(http, jsonl(kql_items(N_ITEMS)))

    wait_for(lambda: scores_landed(db_url, batch_id) >= N_ITEMS // 4, timeout=90, message="a quarter of the items to land")
    # Judge calls are in flight when Postgres goes down and are answered while it is down: their
    # landings must wait for it (store writes retry) rather than be lost and paid for again.
    with judge_calls_in_flight(fake_judge, latency=1.0):
        private_postgres.stop("fast")  # terminates every session, in-flight transactions included
        time.sleep(3.0)
        private_postgres.start()
    assert scores_landed(db_url, batch_id) < N_ITEMS, "the batch finished before the restart: make it bigger"

    assert wait_batch_finished(db_url, batch_id, timeout=150) == ("completed", N_ITEMS, N_ITEMS)
    assert worker.alive()
    assert_scored_exactly_once(db_url, batch_id, N_ITEMS, COMPONENTS)
    _assert_view_complete(_api_view(api, batch_id), N_ITEMS)
    counts = judge_counts(fake_judge)
    assert len(counts) == N_ITEMS and set(counts.values()) == {1}, f"judge calls repeated: {repeated_calls(fake_judge)}"


def _open_upload_transactions() -> int:
    """Sessions on the test database holding a transaction that wrote something (the upload's)."""
    with psycopg.connect(plain_pg_url(TEST_ENV["ASSAY_DATABASE_URL"]), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()",
            (TEST_DB,),
        ).fetchone()[0]


def _items_inserted() -> int:
    """Rows ever inserted into ``items`` (committed or not): Postgres counts a transaction's inserts
    when it ends, rolled back or not."""
    with psycopg.connect(plain_pg_url(TEST_ENV["ASSAY_DATABASE_URL"]), autocommit=True) as conn:
        return conn.execute("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'items'").fetchone()[0]


def _row_counts() -> dict[str, int]:
    with psycopg.connect(plain_pg_url(TEST_ENV["ASSAY_DATABASE_URL"])) as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608 (fixed names)
            for table in ("batches", "items", "scores", "score_components")
        }


def test_api_killed_mid_upload(clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer) -> None:
    """SIGKILL the API while a large JSONL upload streams in: nothing of it is left (its one transaction
    dies with the connection), the same Idempotency-Key is free again, and a fresh upload is scored."""
    env = stack_env(private_redis, fake_judge.base_url)
    api = ApiServer(procs, env).start()
    bulk_lines = jsonl(kql_items(50_000, tag="killed")).splitlines(keepends=True)
    sent = {"lines": 0}
    stop_tail = threading.Event()

    def body() -> Iterator[bytes]:
        for i in range(0, len(bulk_lines), 500):
            chunk = bulk_lines[i : i + 500]
            yield b"".join(chunk)
            sent["lines"] += len(chunk)
        # A slow tail: the upload stays open, mid-stream, until the API is gone.
        tail = kql_items(600, tag="tail")
        for item in tail:
            if stop_tail.wait(0.1):
                return
            yield jsonl([item])

    outcome: dict[str, Any] = {}
    key = f"fault-upload-{uuid.uuid4().hex[:8]}"

    def upload() -> None:
        try:
            with api.client(timeout=120) as http:
                outcome["response"] = http.post(
                    "/api/v1/batches", params={"suite": "kql"}, content=body(),
                    headers={"Idempotency-Key": key, "Content-Type": "application/x-ndjson"},
                )
        except httpx.HTTPError as exc:
            outcome["error"] = exc

    inserted_before = _items_inserted()
    thread = threading.Thread(target=upload, name="upload", daemon=True)
    thread.start()
    try:
        # Mid-stream: the whole bulk has been sent and the API's transaction holds written rows.
        wait_for(lambda: sent["lines"] == len(bulk_lines), timeout=60, message="the bulk of the upload to be sent")
        wait_for(_open_upload_transactions, timeout=30, message="the upload's transaction to have written rows")
        api.kill()
    finally:
        stop_tail.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert "response" not in outcome, f"the upload must not have been answered: {outcome['response'].text[:300]}"
    assert isinstance(outcome.get("error"), httpx.TransportError), outcome

    # Postgres sees the dead connection and rolls the upload's transaction back: nothing is left.
    wait_for(lambda: _open_upload_transactions() == 0, timeout=30, message="the dead upload's transaction to end")
    assert _row_counts() == {"batches": 0, "items": 0, "scores": 0, "score_components": 0}
    # ... although the API had already written a good part of the upload (then rolled back).
    written = wait_for(
        lambda: max(0, _items_inserted() - inserted_before) >= 10_000 and _items_inserted() - inserted_before,
        timeout=30, message="the rolled-back upload's inserts to show in the statistics",
    )
    print(f"[faults] upload killed after {sent['lines']} lines sent, {written} item rows written and rolled back")

    api.start()  # a new API process on the same port
    worker = procs.worker(env)
    fresh = kql_items(8, tag="fresh")
    with api.client() as http:
        r = http.get("/api/v1/batches")
        assert r.status_code == 200 and r.json()["batches"] == []
        r = http.post("/api/v1/batches", params={"suite": "kql"}, content=jsonl(fresh), headers={"Idempotency-Key": key})
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["replayed"] is False and accepted["accepted"] == len(fresh)  # the key was never used
    batch_id = accepted["batch_id"]
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    assert wait_batch_finished(db_url, batch_id, timeout=90) == ("completed", len(fresh), len(fresh))
    assert worker.alive()
    assert_scored_exactly_once(db_url, batch_id, len(fresh), COMPONENTS)
    assert _row_counts() == {"batches": 1, "items": len(fresh), "scores": len(fresh), "score_components": len(fresh) * COMPONENTS}
    counts = judge_counts(fake_judge)
    assert len(counts) == len(fresh) and set(counts.values()) == {1}
