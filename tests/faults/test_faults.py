"""Fault tests: a batch survives repeated worker SIGKILLs, Redis restarted empty, Postgres restarted, a
provider outage (529) and a 429 storm; an API killed mid-upload leaves nothing behind.

Each runs on PRIVATE instances (``conftest.py``): its own ``redis-server`` as broker and breaker store,
and for the Postgres test its own cluster; the API, workers and ``celery beat`` (the reconciler) are
subprocesses on that private stack. Each ends with every item scored exactly once (one completed score
row per item, every component landed once, the batch completed with every score finished)
and no judge call repeated for a component that had already landed: every item's prompt is unique, so
the fake judge counts calls per item.

Every test runs at two scales (``Scale``): ``[short]`` (200 items, one fault each) in the default test
command, and ``[long]`` (10,000 items, repeated faults, a 2-minute outage), marked ``slow`` and so left
out of it: ``pytest -m slow tests/faults`` runs those (one at a time: they take many minutes each).
Knobs for the long runs: ``ASSAY_FAULTS_LONG_ITEMS`` (10000), ``ASSAY_FAULTS_LONG_OUTAGE_SECONDS`` (120),
``ASSAY_FAULTS_LONG_STORM_SECONDS`` (60), ``ASSAY_FAULTS_REPORT`` (a file each run appends its figures
to, as JSON lines). See RELIABILITY.md for what each shows and the figures measured.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest

from assay.settings import Settings
from tests.conftest import TEST_DB, TEST_ENV, wait_for
from tests.faults.conftest import (
    ApiServer,
    BreakerWatch,
    PostgresCluster,
    Processes,
    RedisServer,
    assert_scored_exactly_once,
    jsonl,
    judge_calls_in_flight,
    judge_counts,
    kql_items,
    lifted_rate_limits,
    plain_pg_url,
    reconciler_requeued,
    repeated_calls,
    scores_landed,
    stack_env,
    submit,
    wait_batch_finished,
)

COMPONENTS = 4  # schema_match, semantic_similarity, results_match (metrics queue) + llm_grading (judge queue)
JUDGE_MODEL = "claude-haiku-5-5"  # the kql suite's judge


@dataclass(frozen=True)
class Scale:
    """How big one run of a fault test is, and how often the fault strikes."""

    items: int
    worker_kills: int
    redis_restarts: int
    postgres_restarts: int
    postgres_down_seconds: float
    outage_seconds: float  # 529 for every call
    storm_seconds: float  # 429 with retry-after for every call
    storm_retry_after: float
    breaker_cooldown: float
    upload_after_kill: int  # items uploaded (and scored) with the killed upload's Idempotency-Key
    timeout: float  # for the batch to reach a fault point, or to finish
    in_flight_timeout: float  # for judge calls to be in flight when a fault is about to strike
    long: bool = False
    # Long runs only: the rate governor's configured cap lifted, the planner kept a few thousand
    # messages ahead of the workers (so a queued component is not mistaken for a lost one), and the
    # reconciler's "lost" threshold above the time a component waits in the queue.
    env: dict[str, str] = field(default_factory=dict)


SHORT = Scale(
    items=200, worker_kills=1, redis_restarts=1, postgres_restarts=1, postgres_down_seconds=3.0,
    outage_seconds=10.0, storm_seconds=10.0, storm_retry_after=1.0, breaker_cooldown=2.0,
    upload_after_kill=8, timeout=150.0, in_flight_timeout=30.0,
)
LONG = Scale(
    items=int(os.environ.get("ASSAY_FAULTS_LONG_ITEMS", "10000")),
    worker_kills=4, redis_restarts=2, postgres_restarts=2, postgres_down_seconds=10.0,
    outage_seconds=float(os.environ.get("ASSAY_FAULTS_LONG_OUTAGE_SECONDS", "120")),
    storm_seconds=float(os.environ.get("ASSAY_FAULTS_LONG_STORM_SECONDS", "60")),
    storm_retry_after=10.0, breaker_cooldown=30.0,
    upload_after_kill=int(os.environ.get("ASSAY_FAULTS_LONG_ITEMS", "10000")),
    timeout=3600.0, in_flight_timeout=300.0, long=True,
    env={
        "ASSAY_PLAN_CHUNK_SIZE": "200",
        "ASSAY_MAX_QUEUE_DEPTH": "1000",
        "ASSAY_REQUEUE_AFTER_SECONDS": "120",
        "ASSAY_RECONCILE_INTERVAL_SECONDS": "10",
    },
)
SCALES = [
    pytest.param(SHORT, id="short"),
    pytest.param(LONG, id="long", marks=[pytest.mark.slow, pytest.mark.timeout(7200)]),
]


def _env(scale: Scale, procs: Processes, redis: RedisServer, fake: Any, **extra: str) -> dict[str, str]:
    """The stack's environment at this scale."""
    if scale.long:
        extra = {"ASSAY_CONFIG_DIR": str(lifted_rate_limits(procs.root)), **scale.env, **extra}
    return stack_env(redis, fake.base_url, **extra)


def _report(test: str, scale: Any, **figures: Any) -> None:
    """Print a run's figures (``-s`` shows them) and append them to ``ASSAY_FAULTS_REPORT`` if set."""
    line = {"test": test, "scale": "long" if scale.long else "short", "items": scale.items,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), **figures}
    print(f"[faults] {json.dumps(line)}")
    target = os.environ.get("ASSAY_FAULTS_REPORT")
    if target:
        with open(target, "a") as handle:
            handle.write(json.dumps(line) + "\n")


def _fault_points(scale: Scale, faults: int) -> list[int]:
    """Landed judgments at which each of ``faults`` faults strikes, spread over the batch. Judgments,
    not scores: the judge queue drains ahead of the metrics queues, and a fault must strike while
    judge calls remain to be made."""
    return [scale.items * (i + 1) // (faults + 2) for i in range(faults)]


def _wait_judged(db_url: str, batch_id: str, at_least: int, timeout: float) -> None:
    wait_for(
        lambda: _judge_components(db_url, batch_id).get("ok", 0) >= at_least,
        timeout=timeout, interval=0.5, message=f"{at_least} judgments to land",
    )


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


def _assert_judged_once(fake: Any, n: int) -> None:
    counts = judge_counts(fake)
    # A repeat here means a judge answer that had been received (paid for) was thrown away because
    # the breaker/governor bookkeeping or the store failed after the call, and was paid for again.
    assert len(counts) == n and set(counts.values()) == {1}, f"judge calls repeated: {repeated_calls(fake)}"


# --- repeated worker SIGKILL --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _KillSnapshot:
    """The judge's state right after a kill, with no worker alive: nothing is in flight any more."""

    judge: dict[str, int]  # llm_grading components by status
    counts: dict[str, int]  # judge calls per item key so far
    calls: int  # judge calls so far

    @property
    def landed(self) -> int:
        return self.judge.get("ok", 0)

    @property
    def lost(self) -> int:
        """Calls made by now that never landed: every call either landed or died with a killed worker."""
        return self.calls - self.landed


@pytest.mark.parametrize("scale", SCALES)
def test_worker_sigkill_mid_batch(
    scale: Scale, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """SIGKILL the worker mid-batch (``worker_kills`` times, judge calls in flight each time), start a
    fresh one each time: what a dead worker held (unacked messages, leased components) is recovered by
    the visibility timeout and the reconciler, and only its unlanded judge calls are redone."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    env = _env(
        scale, procs, private_redis, fake_judge,
        # Unacked messages of a dead worker come back after the visibility timeout; leases it held
        # expire quickly so the reconciler (beat) re-enqueues them. A lease still outlives a judge
        # call (~50 ms) by far, and stays below the visibility timeout, as the app requires.
        ASSAY_VISIBILITY_TIMEOUT_SECONDS="10",
        ASSAY_JUDGE_LEASE_SECONDS="8",
        ASSAY_METRICS_LEASE_SECONDS="8",
    )
    api = ApiServer(procs, env).start()
    procs.beat(env)
    worker = procs.worker(env)
    started = time.monotonic()
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(scale.items)))

    snapshots: list[_KillSnapshot] = []
    for point in _fault_points(scale, scale.worker_kills):
        _wait_judged(db_url, batch_id, point, scale.timeout)
        with judge_calls_in_flight(fake_judge, latency=1.0, timeout=scale.in_flight_timeout):
            worker.kill()  # SIGKILL to the worker's whole process group, judge calls in flight
            time.sleep(1.0)  # let Postgres and the fake take in whatever the dead worker had already sent
        report = fake_judge.calls()
        snapshots.append(_KillSnapshot(_judge_components(db_url, batch_id), dict(report["counts"]), report["total"]))
        assert scores_landed(db_url, batch_id) < scale.items, "the batch finished before the kill: make it bigger"
        worker = procs.worker(env)
    first = snapshots[0]
    assert set(first.counts.values()) <= {1}, "a judge call was repeated before any fault"

    assert wait_batch_finished(db_url, batch_id, timeout=scale.timeout) == ("completed", scale.items, scale.items)
    elapsed = time.monotonic() - started
    assert_scored_exactly_once(db_url, batch_id, scale.items, COMPONENTS)
    _assert_view_complete(_api_view(api, batch_id), scale.items)

    counts = judge_counts(fake_judge)
    assert len(counts) == scale.items, "one judge item key per item"
    # The exact accounting: every judge call beyond one per item is a call that was in flight (made,
    # not landed) when a worker died. Anything more is a component judged again after it had landed.
    lost = snapshots[-1].lost
    assert sum(counts.values()) == scale.items + lost, f"judge calls repeated: {repeated_calls(fake_judge)}"
    assert max(counts.values()) <= 1 + scale.worker_kills
    previous = 0
    for snap in snapshots:
        # Items whose judgment had landed by this kill kept their calls; every item called but not
        # landed then (in flight at this kill, or at an earlier one and not yet redone) was called again.
        unchanged = sum(1 for key, calls in snap.counts.items() if counts[key] == calls)
        assert unchanged == snap.landed, (unchanged, snap.landed, snap.judge)
        assert snap.lost - previous >= 2 and snap.judge.get("in_progress", 0) >= 2, (
            "each kill was meant to catch judge calls in flight", snap.judge, snap.lost - previous,
        )
        previous = snap.lost
    _report(
        "worker_sigkill", scale, kills=len(snapshots), wall_s=round(elapsed, 1),
        items_per_s=round(scale.items / elapsed, 2),
        redone_per_kill=[b - a for a, b in zip([0] + [s.lost for s in snapshots], [s.lost for s in snapshots])],
        redone_total=lost, judge_calls=sum(counts.values()), reconciler_requeued=reconciler_requeued(procs),
    )


# --- Redis restarted empty ------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_redis_restarted_empty_mid_batch(
    scale: Scale, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """The broker (and breaker store) is SIGKILLed and comes back EMPTY mid-batch (``redis_restarts``
    times): the worker reconnects and consumes again, the reconciler re-enqueues the lost messages, and
    nothing is judged twice."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    env = _env(scale, procs, private_redis, fake_judge)
    api = ApiServer(procs, env).start()
    beat = procs.beat(env)
    worker = procs.worker(env)
    started = time.monotonic()
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(scale.items)))

    for point in _fault_points(scale, scale.redis_restarts):
        _wait_judged(db_url, batch_id, point, scale.timeout)
        # Judge calls are in flight when Redis dies and are answered while it is down (1.5 s): the
        # answers must still land (they are paid for), whatever happens to the breaker's and
        # governor's bookkeeping.
        with judge_calls_in_flight(fake_judge, latency=1.0, timeout=scale.in_flight_timeout):
            private_redis.restart_empty(down_seconds=1.5)
        assert scores_landed(db_url, batch_id) < scale.items, "the batch finished before the restart: make it bigger"

    assert wait_batch_finished(db_url, batch_id, timeout=scale.timeout) == ("completed", scale.items, scale.items)
    elapsed = time.monotonic() - started
    assert worker.alive() and beat.alive(), "the worker and beat must ride out the broker restarts"
    assert_scored_exactly_once(db_url, batch_id, scale.items, COMPONENTS)
    _assert_view_complete(_api_view(api, batch_id), scale.items)
    # The same worker consumed again from each new, empty server (it reconnected; nothing re-declared
    # by hand): everything a restart lost was re-enqueued there by the reconciler and consumed.
    assert worker.text().count("Connected to redis://") >= 1 + scale.redis_restarts, worker.tail()
    _assert_judged_once(fake_judge, scale.items)
    _report(
        "redis_restarted_empty", scale, restarts=private_redis.restarts, wall_s=round(elapsed, 1),
        items_per_s=round(scale.items / elapsed, 2), judge_calls=fake_judge.calls()["total"],
        reconciler_requeued=reconciler_requeued(procs),
    )


# --- Postgres restarted ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_postgres_restarted_mid_batch(
    scale: Scale, fake_judge: Any, procs: Processes, private_redis: RedisServer, private_postgres: PostgresCluster
) -> None:
    """The store goes down mid-batch (fast shutdown, ``postgres_down_seconds``, start; ``postgres_restarts``
    times): tasks retry their store writes, landings in flight survive, and the batch completes with
    nothing judged twice."""
    db_url = private_postgres.url("assay")
    env = _env(scale, procs, private_redis, fake_judge, ASSAY_DATABASE_URL=db_url)
    api = ApiServer(procs, env).start()
    procs.beat(env)
    worker = procs.worker(env)
    started = time.monotonic()
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(scale.items)))

    for point in _fault_points(scale, scale.postgres_restarts):
        _wait_judged(db_url, batch_id, point, scale.timeout)
        # Judge calls are in flight when Postgres goes down and are answered while it is down: their
        # landings must wait for it (store writes retry) rather than be lost and paid for again.
        with judge_calls_in_flight(fake_judge, latency=1.0, timeout=scale.in_flight_timeout):
            private_postgres.stop("fast")  # terminates every session, in-flight transactions included
            time.sleep(scale.postgres_down_seconds)
            private_postgres.start()
        assert scores_landed(db_url, batch_id) < scale.items, "the batch finished before the restart: make it bigger"

    assert wait_batch_finished(db_url, batch_id, timeout=scale.timeout) == ("completed", scale.items, scale.items)
    elapsed = time.monotonic() - started
    assert worker.alive()
    assert_scored_exactly_once(db_url, batch_id, scale.items, COMPONENTS)
    _assert_view_complete(_api_view(api, batch_id), scale.items)
    _assert_judged_once(fake_judge, scale.items)
    _report(
        "postgres_restarted", scale, restarts=scale.postgres_restarts, down_s=scale.postgres_down_seconds,
        wall_s=round(elapsed, 1), items_per_s=round(scale.items / elapsed, 2),
        judge_calls=fake_judge.calls()["total"], reconciler_requeued=reconciler_requeued(procs),
    )


# --- provider trouble: a 529 outage, a 429 storm -----------------------------------------------------------------


def _ride_out_provider_trouble(
    scale: Scale, fake: Any, procs: Processes, redis: RedisServer, *, kind: str, seconds: float,
    retry_after: float | None,
) -> dict[str, Any]:
    """Every judge call is answered ``kind`` (529 overloaded, 429 rate_limit with ``retry_after``) for
    ``seconds`` mid-batch, and once the trouble ends the batch finishes with zero failed items and every
    item judged (answered) exactly once. A 529 outage opens the breaker, and only its probes reach the
    provider while it is open; a 429 storm never opens it (a rate limit is backpressure): the rate
    governor holds every call for the retry-after instead. Returns the run's figures."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    cooldown = scale.breaker_cooldown
    env = _env(scale, procs, redis, fake, ASSAY_BREAKER_COOLDOWN_SECONDS=f"{cooldown:g}")
    api = ApiServer(procs, env).start()
    procs.beat(env)
    procs.worker(env)
    started = time.monotonic()
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(scale.items)))

    _wait_judged(db_url, batch_id, scale.items // 10, scale.timeout)
    watch = BreakerWatch(redis, env, JUDGE_MODEL).start()
    began = time.time()
    fake.configure(default_kind=kind, default_retry_after=retry_after)
    try:
        time.sleep(seconds)
        landed_by_end = scores_landed(db_url, batch_id)
    finally:
        fake.configure(default_kind="ok", default_retry_after=None)
    ended = time.time()
    assert landed_by_end < scale.items, "the batch finished during the trouble: make it bigger"

    assert wait_batch_finished(db_url, batch_id, timeout=scale.timeout) == ("completed", scale.items, scale.items)
    elapsed = time.monotonic() - started
    watch.stop()
    assert_scored_exactly_once(db_url, batch_id, scale.items, COMPONENTS)  # zero failed items
    _assert_view_complete(_api_view(api, batch_id), scale.items)

    report = fake.calls()
    calls = sorted(report["calls"], key=lambda c: c["at"])
    failed = [c for c in calls if c["status"] != 200]
    # Every item judged exactly once (one answered call each, no repair); besides that only calls
    # answered with the trouble were sent, all of them inside its window.
    assert len(report["answered"]) == scale.items and set(report["answered"].values()) == {1}
    assert report["total"] == scale.items + len(failed) and not report["repairs"]
    # (A call's time is when it arrived; its answer is chosen once its body is read, a moment later.)
    outside = [round(c["at"] - began, 3) for c in failed if not began - 1.0 <= c["at"] <= ended]
    assert failed and not outside, f"failures outside the trouble's window (s after it began): {outside}"
    status = 529 if kind == "overloaded" else 429
    assert {c["status"] for c in failed} == {status}

    if kind == "rate_limit":
        assert retry_after is not None and not watch.opened_at, f"a 429 storm opened the breaker: {watch.opened_at}"
        _assert_fleet_held(calls, retry_after, int(env["ASSAY_JUDGE_CONCURRENCY"]))
        return {
            "trouble_s": round(ended - began, 1), "status": status, "retry_after": retry_after,
            "failed_calls": len(failed), "openings": 0, "wall_s": round(elapsed, 1),
            "items_per_s": round(scale.items / elapsed, 2), "judge_calls": report["total"],
            "reconciler_requeued": reconciler_requeued(procs),
        }
    # The breaker opened during the trouble, and closed again after it.
    assert watch.opened_at, "the breaker never opened"
    opened = watch.opened_at[0]
    assert began <= opened <= ended, (began, opened, ended)
    assert watch.state == "closed" and watch.closed_at is not None and watch.closed_at >= ended
    # While it was open only probes reached the provider: one per cool-down at most (calls already in
    # flight when it opened arrived before it did).
    during = [c for c in calls if opened + 0.5 < c["at"] < ended]
    assert len(during) <= math.ceil((ended - opened) / cooldown) + 1, [round(c["at"] - opened, 2) for c in during]
    for earlier, later in itertools.pairwise(during):
        assert later["at"] - earlier["at"] >= cooldown * 0.8, (earlier, later)
    return {
        "trouble_s": round(ended - began, 1), "status": status, "retry_after": retry_after, "cooldown_s": cooldown,
        "failed_calls": len(failed), "probes_while_open": len(during), "openings": len(watch.opened_at),
        "closed_after_end_s": round(watch.closed_at - ended, 1), "wall_s": round(elapsed, 1),
        "items_per_s": round(scale.items / elapsed, 2), "judge_calls": report["total"],
        "reconciler_requeued": reconciler_requeued(procs),
    }


def _assert_fleet_held(calls: list[dict[str, Any]], retry_after: float, in_flight: int) -> None:
    """After every 429 that started a hold (one that came back while none ran), the fleet sent no more
    calls until its retry-after had passed than it can have in flight (without the hold, hundreds), and
    no item was sent again sooner than its retry-after."""
    arrivals = [c["at"] for c in calls]
    hold_ends = 0.0
    for answered in (c for c in calls if c["status"] == 429):
        if answered["at"] < hold_ends:
            continue  # a call sent before the running hold began: it does not start another
        hold_ends = answered["at"] + retry_after
        early = [round(at - answered["at"], 3) for at in arrivals
                 if answered["at"] < at < answered["at"] + retry_after - 0.1]
        assert len(early) <= in_flight, f"calls sent during a 429's retry-after (s after it): {early}"
    last: dict[str, float] = {}
    for call in calls:
        key = call["item_key"]
        if key in last:
            assert call["at"] - last[key] >= retry_after, (key[:12], call["at"] - last[key])
        last[key] = call["at"]


@pytest.mark.parametrize("scale", SCALES)
def test_provider_outage_529(
    scale: Scale, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """The provider answers 529 overloaded to every call for ``outage_seconds`` (2 minutes, long run)."""
    figures = _ride_out_provider_trouble(
        scale, fake_judge, procs, private_redis, kind="overloaded", seconds=scale.outage_seconds, retry_after=None
    )
    _report("provider_outage_529", scale, **figures)


@pytest.mark.parametrize("scale", SCALES)
def test_rate_limit_storm_429(
    scale: Scale, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """The provider answers 429 with a retry-after to every call for ``storm_seconds``: the breaker
    stays closed and the fleet waits each retry-after out."""
    figures = _ride_out_provider_trouble(
        scale, fake_judge, procs, private_redis, kind="rate_limit", seconds=scale.storm_seconds,
        retry_after=scale.storm_retry_after,
    )
    _report("rate_limit_storm_429", scale, **figures)


# --- the API killed mid-upload ----------------------------------------------------------------------------------


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
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # fixed table names
            for table in ("batches", "items", "scores", "score_components")
        }


@pytest.mark.parametrize("scale", SCALES)
def test_api_killed_mid_upload(
    scale: Scale, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """SIGKILL the API while a 50,000-line JSONL upload streams in: nothing of it is left (its one
    transaction dies with the connection), the same Idempotency-Key is free again, and an upload made
    with it afterwards (``upload_after_kill`` items) is scored exactly once."""
    env = _env(scale, procs, private_redis, fake_judge)
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

    api.start()  # a new API process on the same port
    worker = procs.worker(env)
    n = scale.upload_after_kill
    started = time.monotonic()
    with api.client(timeout=300) as http:
        r = http.get("/api/v1/batches")
        assert r.status_code == 200 and r.json()["batches"] == []
        r = http.post(
            "/api/v1/batches", params={"suite": "kql"}, content=jsonl(kql_items(n, tag="fresh")),
            headers={"Idempotency-Key": key},
        )
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["replayed"] is False and accepted["accepted"] == n  # the key was never used
    batch_id = accepted["batch_id"]
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    assert wait_batch_finished(db_url, batch_id, timeout=scale.timeout) == ("completed", n, n)
    elapsed = time.monotonic() - started
    assert worker.alive()
    assert_scored_exactly_once(db_url, batch_id, n, COMPONENTS)
    assert _row_counts() == {"batches": 1, "items": n, "scores": n, "score_components": n * COMPONENTS}
    _assert_judged_once(fake_judge, n)
    _report(
        "api_killed_mid_upload", scale, lines_sent_at_kill=sent["lines"], rows_written_then_rolled_back=written,
        rescored_items=n, wall_s=round(elapsed, 1), items_per_s=round(n / elapsed, 2),
    )


# --- random 429s among answered calls -------------------------------------------------------------------------


@dataclass(frozen=True)
class RandomStorm:
    items: int
    share: float  # of judge calls answered 429
    retry_after: float
    latency: float
    timeout: float
    long: bool = False


RANDOM_STORMS = [
    pytest.param(
        RandomStorm(items=300, share=0.3, retry_after=1.0, latency=0.05, timeout=240.0), id="short",
        marks=pytest.mark.timeout(600),
    ),
    # The outside run's storm: 2,000 items, 30 % of calls 429 with retry-after 1 s, a 200 ms judge.
    pytest.param(
        RandomStorm(items=2000, share=0.3, retry_after=1.0, latency=0.2, timeout=1800.0, long=True),
        id="long", marks=[pytest.mark.slow, pytest.mark.timeout(3600)],
    ),
]


@pytest.mark.parametrize("storm", RANDOM_STORMS)
def test_random_429s_never_open_the_breaker_and_the_batch_finishes(
    storm: RandomStorm, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """30 % of judge calls answered 429 for the whole batch, with 16 calls in flight: with 429s counted
    as failures, random runs of five kept opening the breaker and the batch crawled. A rate limit is
    backpressure: the breaker never opens, the fleet waits each retry-after out, the batch finishes."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    fake_judge.configure(latency=storm.latency, default_kind="rate_limit", default_retry_after=storm.retry_after,
                         default_share=storm.share)
    config = {"ASSAY_CONFIG_DIR": str(lifted_rate_limits(procs.root))} if storm.long else {}
    env = stack_env(private_redis, fake_judge.base_url, ASSAY_JUDGE_CONCURRENCY="16", **config)
    api = ApiServer(procs, env).start()
    procs.beat(env)
    procs.worker(env)
    watch = BreakerWatch(private_redis, env, JUDGE_MODEL).start()
    started = time.monotonic()
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(storm.items)))
    assert wait_batch_finished(db_url, batch_id, timeout=storm.timeout) == ("completed", storm.items, storm.items)
    elapsed = time.monotonic() - started
    watch.stop()
    assert_scored_exactly_once(db_url, batch_id, storm.items, COMPONENTS)
    report = fake_judge.calls()
    calls = sorted(report["calls"], key=lambda c: c["at"])
    failed = [c for c in calls if c["status"] != 200]
    assert len(report["answered"]) == storm.items and set(report["answered"].values()) == {1}
    assert failed and {c["status"] for c in failed} == {429} and report["total"] == storm.items + len(failed)
    assert not watch.opened_at, f"random 429s opened the breaker {len(watch.opened_at)} time(s)"
    _assert_fleet_held(calls, storm.retry_after, 16)
    _report(
        "random_429s", storm, share=storm.share,
        retry_after=storm.retry_after, latency_s=storm.latency, wall_s=round(elapsed, 1),
        items_per_s=round(storm.items / elapsed, 2), judge_calls=report["total"], answered_429=len(failed),
        openings=len(watch.opened_at),
    )


# --- recovery with the default settings: a killed judge worker, Redis restarted empty -----------------------------

# The production defaults of everything that decides how soon lost work is taken up again (the test
# environment shortens some): leases (renewed by a live worker's heartbeat), the reconciler's period, when
# a queued component counts as lost, the broker's visibility timeout.
DEFAULT_RECOVERY_ENV = {
    f"ASSAY_{name.upper()}": str(Settings.model_fields[name].default)
    for name in (
        "judge_lease_seconds", "metrics_lease_seconds", "reconcile_interval_seconds", "requeue_after_seconds",
        "visibility_timeout_seconds",
    )
}
# What "about a minute" means here: a lease (60 s) that a dead worker no longer renews, one reconciler
# period (30 s) to notice it ran out, and some slack.
RESUME_WITHIN_S = 105.0
RECONCILE_S = 30.0


@dataclass(frozen=True)
class Recovery:
    items: int
    latency: float  # of the fake judge
    timeout: float
    # Queues shallow enough that the planner is still at work when Redis restarts.
    max_queue_depth: int
    plan_chunk_size: int
    long: bool = False


RECOVERIES = [
    # The planner gets at most the depth plus the worker's 4 reserved messages ahead of the judge, and a
    # judge message carries 8 components: at 4, about 64 of 200 items, so it is still at work when a
    # third is judged (at 20 it could get 192 ahead, and in one CI run it had finished).
    pytest.param(
        Recovery(items=200, latency=0.05, timeout=300.0, max_queue_depth=4, plan_chunk_size=10), id="short",
        marks=pytest.mark.timeout(600),
    ),
    # The outside run's batch: 2,000 items with unique prompts, a 200 ms judge.
    pytest.param(
        Recovery(items=2000, latency=0.2, timeout=3000.0, max_queue_depth=50, plan_chunk_size=200, long=True),
        id="long", marks=[pytest.mark.slow, pytest.mark.timeout(3600)],
    ),
]


def _in_progress_judgments(db_url: str, batch_id: str) -> list[str]:
    with psycopg.connect(plain_pg_url(db_url)) as conn:
        return [
            str(score_id)
            for (score_id,) in conn.execute(
                "SELECT c.score_id FROM score_components c JOIN scores s ON s.id = c.score_id "
                "WHERE s.batch_id = %s AND c.component = 'llm_grading' AND c.status = 'in_progress'",
                (batch_id,),
            ).fetchall()
        ]


def _landed_judgments(db_url: str, score_ids: list[str]) -> int:
    with psycopg.connect(plain_pg_url(db_url)) as conn:
        return conn.execute(
            "SELECT count(*) FROM score_components WHERE component = 'llm_grading' AND status = 'ok' "
            "AND score_id = ANY(%s::uuid[])",
            (score_ids,),
        ).fetchone()[0]


@pytest.mark.parametrize("run", RECOVERIES)
def test_killed_judge_workers_claims_resume_within_about_a_lease(
    run: Recovery, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """With the default settings, a judge worker is SIGKILLed with calls in flight and a new one starts:
    the components the dead one had claimed are judged again within about a lease (their leases, no
    longer renewed, run out; the reconciler re-sends them), not after the 900 s leases of old."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    fake_judge.configure(latency=run.latency)
    config = {"ASSAY_CONFIG_DIR": str(lifted_rate_limits(procs.root))} if run.long else {}
    env = _stack_defaults(private_redis, fake_judge, **config)
    api = ApiServer(procs, env).start()
    procs.beat(env)
    procs.worker(env, queues="metrics,control")
    judge = procs.worker(env, queues="judge")
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(run.items)))
    _wait_judged(db_url, batch_id, run.items // 3, run.timeout)
    with judge_calls_in_flight(fake_judge, latency=2.0, fast_latency=run.latency, timeout=60):
        judge.kill()
        killed = time.monotonic()
    claimed = _in_progress_judgments(db_url, batch_id)  # only the dead worker had claimed any
    assert claimed, "the kill was meant to catch claimed judgments"
    procs.worker(env, queues="judge")
    resumed = wait_for(
        lambda: _landed_judgments(db_url, claimed) == len(claimed) and time.monotonic() - killed,
        timeout=RESUME_WITHIN_S + 30, interval=0.5, message="the dead worker's claims to be judged",
    )
    assert resumed <= RESUME_WITHIN_S, f"the dead worker's claims were judged {resumed:.0f} s after the kill"
    assert wait_batch_finished(db_url, batch_id, timeout=run.timeout) == ("completed", run.items, run.items)
    finished = time.monotonic() - killed
    assert_scored_exactly_once(db_url, batch_id, run.items, COMPONENTS)
    _report(
        "killed_judge_worker_default_settings", run, claimed_at_kill=len(claimed),
        claims_landed_after_kill_s=round(resumed, 1), kill_to_completion_s=round(finished, 1),
        judge_calls=fake_judge.calls()["total"], reconciler_requeued=reconciler_requeued(procs),
    )


@pytest.mark.parametrize("run", RECOVERIES)
def test_redis_restarted_empty_with_the_default_settings(
    run: Recovery, clean_db: None, fake_judge: Any, procs: Processes, private_redis: RedisServer
) -> None:
    """With the default settings, Redis (broker, breaker and governor store) restarts empty while the
    planner is still pacing the batch into shallow queues: the planner rides out the broker error, and
    the reconciler, finding the broker's marker gone, re-sends all pending work at its next pass instead
    of once it looks stale. Nothing is judged twice."""
    db_url = TEST_ENV["ASSAY_DATABASE_URL"]
    fake_judge.configure(latency=run.latency)
    config = {"ASSAY_CONFIG_DIR": str(lifted_rate_limits(procs.root))} if run.long else {}
    # Shallow queues keep the planner at work for the whole batch (it re-sends itself every 2 s).
    env = _stack_defaults(
        private_redis, fake_judge, ASSAY_MAX_QUEUE_DEPTH=str(run.max_queue_depth),
        ASSAY_PLAN_CHUNK_SIZE=str(run.plan_chunk_size), **config,
    )
    api = ApiServer(procs, env).start()
    beat = procs.beat(env)
    worker = procs.worker(env)
    with api.client(timeout=300) as http:
        batch_id = submit(http, jsonl(kql_items(run.items)))
    _wait_judged(db_url, batch_id, run.items // 3, run.timeout)
    with judge_calls_in_flight(fake_judge, latency=1.0, fast_latency=run.latency, timeout=60):
        restarted = time.monotonic()
        private_redis.restart_empty(down_seconds=3.0)
    assert scores_landed(db_url, batch_id) < run.items, "the batch finished before the restart: make it bigger"
    with psycopg.connect(plain_pg_url(db_url)) as conn:
        status = conn.execute("SELECT status FROM batches WHERE id = %s", (batch_id,)).fetchone()[0]
    assert status == "planning", "the restart was meant to strike while the planner was at work"
    assert wait_batch_finished(db_url, batch_id, timeout=run.timeout) == ("completed", run.items, run.items)
    finished = time.monotonic() - restarted
    assert worker.alive() and beat.alive()
    assert_scored_exactly_once(db_url, batch_id, run.items, COMPONENTS)
    _assert_judged_once(fake_judge, run.items)
    if not run.long:  # the rest of a 200-item batch takes seconds: recovery is what is left
        assert finished <= RECONCILE_S + 60, f"the batch finished {finished:.0f} s after the restart"
    _report(
        "redis_restarted_empty_default_settings", run, restart_to_completion_s=round(finished, 1),
        judge_calls=fake_judge.calls()["total"], reconciler_requeued=reconciler_requeued(procs),
    )


def _stack_defaults(redis: RedisServer, fake: Any, **extra: str) -> dict[str, str]:
    return stack_env(redis, fake.base_url, **{**DEFAULT_RECOVERY_ENV, **extra})
