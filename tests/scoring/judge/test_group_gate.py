"""A group's calls ask the breaker and the governor once (GroupGate), with the breaker's per-call
semantics kept: one probe when half-open, no unsent call of a group once it opened."""

from __future__ import annotations

import time

import pytest
import redis

from assay.scoring.judge import group
from assay.scoring.judge.breaker import BreakerOpen
from assay.scoring.judge.governor import InProcessGovernor, RateLimits, RedisGovernor
from assay.scoring.judge.group import GroupGate

MODEL = "claude-haiku-5-5"
OTHER = "claude-sonnet-5"
COOLDOWN = 0.3


class Counting:
    """Counts the calls made to the wrapped breaker or governor, by method name."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.asked: dict[str, int] = {}

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        method = getattr(self.inner, name)

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.asked[name] = self.asked.get(name, 0) + 1
            return method(*args, **kwargs)

        return counted


@pytest.fixture(params=["redis", "in_process"])
def make_governor(request: pytest.FixtureRequest, redis_client: redis.Redis, key_prefix: str):
    def build(limits: dict[str, RateLimits]):  # type: ignore[no-untyped-def]
        if request.param == "redis":
            return RedisGovernor(redis_client, key_prefix, limits)
        return InProcessGovernor(limits)

    return build


def unlimited(make_governor):  # type: ignore[no-untyped-def]
    return make_governor({MODEL: RateLimits(1_000_000, 100_000_000), OTHER: RateLimits(1_000_000, 100_000_000)})


def send(gate: GroupGate, model: str = MODEL, tokens: int = 100) -> bool:
    """One call's questions, in the judge's order: the breaker, then the governor (0: go)."""
    news = gate.before_call(model)
    assert gate.acquire(model, tokens) == 0.0
    return news


def test_a_closed_breaker_and_the_governor_are_asked_once_per_model_for_the_whole_group(make_breaker, make_governor):
    breaker, governor = Counting(make_breaker()), Counting(unlimited(make_governor))
    gate = GroupGate(breaker, governor, {MODEL: 3, OTHER: 2})

    news = [send(gate, MODEL), send(gate, OTHER), send(gate, MODEL), send(gate, MODEL), send(gate, OTHER)]

    assert news == [False] * 5  # a closed breaker with no failure: no success of these is news
    assert breaker.asked == {"before_group": 2}
    assert governor.asked == {"acquire": 2}


def test_the_group_takes_its_requests_and_tokens_from_the_governor_at_once(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=5, input_tokens_per_minute=1_000_000)})
    breaker = Counting(type("Closed", (), {"before_group": lambda self, m: True})())
    gate = GroupGate(breaker, governor, {MODEL: 4})
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 100) == 0.0  # the group's four requests of the minute are taken at once
    assert governor.acquire(MODEL, 100, 0) == 0.0 and governor.acquire(MODEL, 100, 2) > 0  # 4 + 2 > 5

    # One request of the minute is left: a third group of 2 does not fit, so its calls ask one by one.
    third = GroupGate(breaker, governor, {MODEL: 2})
    third.before_call(MODEL)
    assert third.acquire(MODEL, 100) == 0.0  # the last request of the minute
    assert third.acquire(MODEL, 100) > 0  # and no more


def test_a_longer_prompt_takes_the_tokens_it_needs_beyond_the_groups_estimate(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1000)})
    gate = GroupGate(Counting(type("Closed", (), {"before_group": lambda self, m: True})()), governor, {MODEL: 2})
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 300) == 0.0  # the group takes 2 x 300
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 800) > 0  # 500 beyond the 300 left of the group's would make 1,100 of 1,000
    assert gate.acquire(MODEL, 500) == 0.0  # 200 beyond it fit: 800 of 1,000
    assert governor.acquire(MODEL, 200, 0) == 0.0 and governor.acquire(MODEL, 100, 0) > 0


def test_a_half_open_breaker_lets_exactly_one_call_of_a_group_through(make_breaker, make_governor):
    breaker = make_breaker(threshold=1, cooldown_seconds=COOLDOWN)
    breaker.before_call(MODEL)
    breaker.record_failure(MODEL)
    time.sleep(COOLDOWN + 0.05)
    gate = GroupGate(breaker, unlimited(make_governor), {MODEL: 4})

    went, refused = 0, 0
    for _ in range(4):
        try:
            assert gate.before_call(MODEL) is True  # the probe's success is news
            went += 1
        except BreakerOpen:
            refused += 1
    assert (went, refused) == (1, 3)


def test_a_breaker_that_opens_mid_group_stops_the_groups_unsent_calls(make_breaker, make_governor):
    breaker = make_breaker(threshold=2, cooldown_seconds=30)
    gate = GroupGate(breaker, unlimited(make_governor), {MODEL: 5})
    send(gate)
    send(gate)
    gate.record_failure(MODEL)  # the two calls sent meet an outage: the breaker opens
    gate.record_failure(MODEL)
    for _ in range(3):  # the group's three unsent calls ask the breaker, which refuses them
        with pytest.raises(BreakerOpen):
            gate.before_call(MODEL)


def test_one_failure_in_the_group_makes_its_other_calls_ask_one_by_one(make_breaker, make_governor):
    breaker = Counting(make_breaker(threshold=5, cooldown_seconds=30))
    gate = GroupGate(breaker, unlimited(make_governor), {MODEL: 3})
    send(gate)
    gate.record_failure(MODEL)
    assert send(gate) is True  # asked for itself: a failure is counted, so its success is news
    assert breaker.asked["before_call"] == 1


def test_a_call_started_after_the_groups_admission_ran_out_asks_for_itself(make_breaker, make_governor, monkeypatch):
    now = [100.0]
    breaker = Counting(make_breaker())
    gate = GroupGate(breaker, unlimited(make_governor), {MODEL: 2}, clock=lambda: now[0])
    send(gate)
    now[0] += group.PASS_SECONDS + 0.1
    send(gate)
    assert breaker.asked == {"before_group": 1, "before_call": 1}


def test_a_model_the_group_did_not_name_asks_call_by_call(make_breaker, make_governor):
    breaker = Counting(make_breaker())
    gate = GroupGate(breaker, unlimited(make_governor), {MODEL: 2})
    send(gate, OTHER)
    send(gate, OTHER)
    assert breaker.asked == {"before_call": 2}


def test_a_429_revokes_the_groups_governor_grant(make_breaker, make_governor):
    governor = Counting(unlimited(make_governor))
    gate = GroupGate(make_breaker(), governor, {MODEL: 3})
    send(gate)
    gate.hold(MODEL, 0.5)
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 100) > 0  # held: the rest of the group waits with the fleet
