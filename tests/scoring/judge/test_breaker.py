"""The circuit breaker's state machine, on Redis (shared by a fleet) and in process."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from assay.scoring.judge.breaker import BreakerOpen, RedisBreaker

MODEL = "claude-haiku-5-5"
COOLDOWN = 0.3


def trip(breaker, times: int = 5, model: str = MODEL) -> None:
    for _ in range(times):
        breaker.before_call(model)
        breaker.record_failure(model)


def state_of(breaker, model: str = MODEL) -> dict:
    return next(row for row in breaker.status() if row["model"] == model)


def test_opens_after_threshold_consecutive_failures(make_breaker):
    breaker = make_breaker(threshold=5, cooldown_seconds=30)
    trip(breaker, 4)
    breaker.before_call(MODEL)  # four failures: still closed
    assert state_of(breaker)["state"] == "closed"

    breaker.record_failure(MODEL)
    with pytest.raises(BreakerOpen) as caught:
        breaker.before_call(MODEL)
    assert 29 < caught.value.retry_in <= 30
    row = state_of(breaker)
    assert row["state"] == "open" and row["failures"] == 5
    assert (row["next_probe_at"] - row["opened_at"]).total_seconds() == pytest.approx(30)


def test_a_success_resets_the_consecutive_count(make_breaker):
    breaker = make_breaker(threshold=5, cooldown_seconds=30)
    trip(breaker, 4)
    breaker.record_success(MODEL)
    trip(breaker, 4)
    breaker.before_call(MODEL)
    expected = {"model": MODEL, "state": "closed", "failures": 4, "opened_at": None, "next_probe_at": None}
    assert state_of(breaker) == expected


def test_before_call_says_whether_a_success_would_be_news(make_breaker):
    breaker = make_breaker(threshold=2, cooldown_seconds=COOLDOWN)
    assert breaker.before_call(MODEL) is False  # closed, nothing counted: a success changes nothing
    assert state_of(breaker) == {
        "model": MODEL, "state": "closed", "failures": 0, "opened_at": None, "next_probe_at": None
    }  # listed from its first call on, success recorded or not
    breaker.record_failure(MODEL)
    assert breaker.before_call(MODEL) is True  # a success now resets the count
    breaker.record_success(MODEL)
    assert breaker.before_call(MODEL) is False
    trip(breaker, 2)
    time.sleep(COOLDOWN + 0.05)
    assert breaker.before_call(MODEL) is True  # the probe: its success closes the breaker


def test_models_have_separate_breakers(make_breaker):
    breaker = make_breaker(threshold=2, cooldown_seconds=30)
    trip(breaker, 2, model="model-a")
    with pytest.raises(BreakerOpen):
        breaker.before_call("model-a")
    breaker.before_call("model-b")


def test_half_open_lets_exactly_one_probe_through(make_breaker):
    breaker = make_breaker(threshold=1, cooldown_seconds=COOLDOWN)
    trip(breaker, 1)
    time.sleep(COOLDOWN + 0.05)
    assert state_of(breaker)["state"] == "half_open"

    admitted, refused = [], []
    barrier = threading.Barrier(16)

    def try_call() -> None:
        barrier.wait()
        try:
            breaker.before_call(MODEL)
            admitted.append(1)
        except BreakerOpen as exc:
            refused.append(exc.retry_in)

    threads = [threading.Thread(target=try_call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 1 and len(refused) == 15
    assert all(0 < wait <= COOLDOWN for wait in refused)


def test_probe_success_closes(make_breaker):
    breaker = make_breaker(threshold=2, cooldown_seconds=COOLDOWN)
    trip(breaker, 2)
    time.sleep(COOLDOWN + 0.05)
    breaker.before_call(MODEL)  # the probe
    breaker.record_success(MODEL)
    for _ in range(5):
        breaker.before_call(MODEL)
    assert state_of(breaker)["state"] == "closed" and state_of(breaker)["failures"] == 0


def test_probe_failure_reopens_for_a_new_cooldown(make_breaker):
    breaker = make_breaker(threshold=2, cooldown_seconds=COOLDOWN)
    trip(breaker, 2)
    first_open = state_of(breaker)["opened_at"]
    time.sleep(COOLDOWN + 0.05)
    breaker.before_call(MODEL)  # the probe
    breaker.record_failure(MODEL)

    with pytest.raises(BreakerOpen) as caught:
        breaker.before_call(MODEL)
    assert caught.value.retry_in > COOLDOWN * 0.5
    row = state_of(breaker)
    assert row["state"] == "open" and row["opened_at"] > first_open
    time.sleep(COOLDOWN + 0.05)
    breaker.before_call(MODEL)  # a new probe is allowed after the new cool-down


def test_stragglers_failing_inside_the_cooldown_do_not_extend_it(make_breaker):
    breaker = make_breaker(threshold=2, cooldown_seconds=COOLDOWN)
    trip(breaker, 2)
    opened_at = state_of(breaker)["opened_at"]
    breaker.record_failure(MODEL)  # a call already in flight when it opened
    assert state_of(breaker)["opened_at"] == opened_at
    time.sleep(COOLDOWN + 0.05)
    breaker.before_call(MODEL)


def test_redis_breaker_is_shared_by_the_fleet(redis_client: redis.Redis, key_prefix: str):
    worker_a = RedisBreaker(redis_client, key_prefix, threshold=5, cooldown_seconds=30)
    other_connection = redis.Redis(host="127.0.0.1", port=6379, db=15, decode_responses=True)
    worker_b = RedisBreaker(other_connection, key_prefix, threshold=5, cooldown_seconds=30)
    trip(worker_a, 3)
    trip(worker_b, 2)
    for worker in (worker_a, worker_b):
        with pytest.raises(BreakerOpen):
            worker.before_call(MODEL)
    assert worker_b.status() == worker_a.status()
    worker_b.record_success(MODEL)
    worker_a.before_call(MODEL)


def test_redis_probe_slot_expires_if_its_holder_dies(redis_client: redis.Redis, key_prefix: str):
    breaker = RedisBreaker(redis_client, key_prefix, threshold=1, cooldown_seconds=0.2, probe_timeout_seconds=0.3)
    trip(breaker, 1)
    time.sleep(0.25)
    breaker.before_call(MODEL)  # the probe, which then never reports back
    with pytest.raises(BreakerOpen):
        breaker.before_call(MODEL)
    time.sleep(0.35)
    breaker.before_call(MODEL)


def test_bad_settings_are_refused(make_breaker):
    with pytest.raises(ValueError):
        make_breaker(threshold=0)
    with pytest.raises(ValueError):
        make_breaker(cooldown_seconds=0)
