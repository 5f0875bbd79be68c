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
        if name == "local_hold":
            return method  # the process's own memory, not a question to the store

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
    # 600 a minute: 0.1 s a request, so the group's four are 0.4 s of the route, within the 0.5 s tolerance.
    governor = make_governor({MODEL: RateLimits(requests_per_minute=600, input_tokens_per_minute=1_000_000)})
    breaker = Counting(type("Closed", (), {"before_group": lambda self, m: True})())
    gate = GroupGate(breaker, governor, {MODEL: 4})
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 100) == 0.0
    assert governor.acquire(MODEL, 100, 0) == 0.0  # tokens alone are free
    assert governor.acquire(MODEL, 100, 2) > 0  # two more requests would be 0.6 s ahead

    # A second group does not fit, so its calls ask one by one: one fits the tolerance, the next waits.
    second = GroupGate(breaker, governor, {MODEL: 2})
    second.before_call(MODEL)
    assert second.acquire(MODEL, 100) == 0.0
    assert second.acquire(MODEL, 100) > 0


def test_a_group_that_would_be_a_burst_by_itself_asks_call_by_call(make_breaker, make_governor):
    # 12 a minute: 5 s a request. Four at once would be 20 s of the route: not even an idle route takes them.
    governor = make_governor({MODEL: RateLimits(requests_per_minute=12, input_tokens_per_minute=1_000_000)})
    gate = GroupGate(make_breaker(), governor, {MODEL: 4})
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 100) == 0.0  # the first call alone (the route is idle)
    gate.before_call(MODEL)
    assert 4.5 < gate.acquire(MODEL, 100) <= 5.0  # the next one waits its turn


def test_a_longer_prompt_takes_the_tokens_it_needs_beyond_the_groups_estimate(make_breaker, make_governor):
    # 60,000 tokens a minute: 1 ms a token, 0.5 s (500 tokens) at once.
    governor = make_governor({MODEL: RateLimits(requests_per_minute=10_000, input_tokens_per_minute=60_000)})
    gate = GroupGate(make_breaker(), governor, {MODEL: 3})
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 100) == 0.0  # the group takes 3 x 100 tokens: 0.3 s of the route
    gate.before_call(MODEL)
    assert gate.acquire(MODEL, 600) > 0  # 400 beyond the 200 left of the group's would be 0.7 s ahead
    assert gate.acquire(MODEL, 100) == 0.0  # within the group's estimate: no wait
    assert governor.acquire(MODEL, 400, 0) > 0


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


def test_a_429_met_by_one_group_stops_the_passes_of_the_processs_other_groups(make_breaker, make_governor):
    governor = unlimited(make_governor)
    first, second = GroupGate(make_breaker(), governor, {MODEL: 3}), GroupGate(make_breaker(), governor, {MODEL: 3})
    send(first)
    send(second)  # the second group holds two passes it has not used yet
    first.hold(MODEL, 0.5)
    second.before_call(MODEL)
    assert 0.3 < second.acquire(MODEL, 100) <= 0.5  # its unsent calls wait with the rest of the process


def test_an_online_group_asks_the_governor_as_online_work(make_breaker):
    class Recording:
        def __init__(self) -> None:
            self.online: list[bool] = []

        def acquire(self, model, tokens, requests=1, *, online=False):  # type: ignore[no-untyped-def]
            self.online.append(online)
            return 0.0

        def charge(self, model, output_tokens, *, online=False):  # type: ignore[no-untyped-def]
            self.online.append(online)

        def local_hold(self, model):  # type: ignore[no-untyped-def]
            return 0.0

    governor = Recording()
    gate = GroupGate(make_breaker(), governor, {MODEL: 1}, online=True)  # type: ignore[arg-type]
    send(gate)
    send(gate, OTHER)
    gate.charge(MODEL, 50)
    assert governor.online == [True, True, True]
