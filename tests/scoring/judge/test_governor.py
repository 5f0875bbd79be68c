"""The rate governor: configured limits shared through Redis, tightened by the provider's headers."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import redis

from assay.scoring.judge import gcra
from assay.scoring.judge.governor import InProcessGovernor, RateLimits, RedisGovernor, estimate_tokens

MODEL = "claude-haiku-5-5"


@pytest.fixture(params=["redis", "in_process"])
def make_governor(request: pytest.FixtureRequest, redis_client: redis.Redis, key_prefix: str):
    """Builds governors of one kind; Redis ones made by one test share their counts, like a fleet."""

    def build(limits: dict[str, RateLimits], **kwargs):
        if request.param == "redis":
            return RedisGovernor(redis_client, key_prefix, limits, **kwargs)
        return InProcessGovernor(limits, **kwargs)

    return build


def rfc3339_in(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat().replace("+00:00", "Z")


def admitted_at_once(governor, model: str = MODEL, asks: int = 50, **kwargs) -> int:  # type: ignore[no-untyped-def]
    """How many asks in a row the governor admits before the first wait."""
    for n in range(asks):
        if governor.acquire(model, 10, **kwargs) > 0:
            return n
    return asks


def test_two_workers_sharing_redis_get_the_burst_tolerance_and_then_the_limits_pace(redis_client, key_prefix):
    # 60 a minute: one a second, and 5.5 s of them (5) at once.
    limits = {MODEL: RateLimits(requests_per_minute=60, input_tokens_per_minute=1_000_000)}
    other_connection = redis.Redis(host="127.0.0.1", port=6379, db=15, decode_responses=True)
    fleet = [
        RedisGovernor(redis_client, key_prefix, limits, burst_seconds=5.5),
        RedisGovernor(other_connection, key_prefix, limits, burst_seconds=5.5),
    ]

    waits = [fleet[i % 2].acquire(MODEL, 100) for i in range(8)]

    assert waits[:5] == [0.0] * 5  # the burst, whichever worker asked
    assert all(0 < w <= 0.5 for w in waits[5:])  # then one a second, not a minute's worth at once


def test_admissions_are_spread_at_the_limits_rate(make_governor):
    # 1,200 a minute is 20 a second: over 1.5 s at most the burst (2) plus 30 go through, whoever waits.
    governor = make_governor(
        {MODEL: RateLimits(requests_per_minute=1200, input_tokens_per_minute=1_000_000)}, burst_seconds=0.1
    )
    began, admitted = time.monotonic(), []
    while (elapsed := time.monotonic() - began) < 1.5:
        wait = governor.acquire(MODEL, 10)
        if wait == 0:
            admitted.append(elapsed)
        else:
            assert wait <= 0.1  # never asked to wait longer than the next slot (and the poll floor)
            time.sleep(wait)
    assert len(admitted) <= 2 + 1.5 * 20 + 1
    assert len(admitted) >= 15  # and it does not starve (a loaded machine sleeps late)
    per_half_second = [sum(1 for a in admitted if k / 2 <= a < (k + 1) / 2) for k in range(3)]
    assert max(per_half_second) <= 2 + 10 + 1, per_half_second  # no half second holds more than its share


def test_a_burst_tolerance_of_zero_admits_one_at_a_time(make_governor):
    governor = make_governor(
        {MODEL: RateLimits(requests_per_minute=60, input_tokens_per_minute=1_000_000)}, burst_seconds=0.0
    )
    assert admitted_at_once(governor) == 1
    assert 0.9 < governor.acquire(MODEL, 10) <= 1.0


def test_input_tokens_are_paced_too(make_governor):
    # 6,000 tokens a minute: 100 a second, 0.5 s of them (50) at once.
    governor = make_governor({MODEL: RateLimits(requests_per_minute=10_000, input_tokens_per_minute=6000)})
    assert governor.acquire(MODEL, 30) == 0.0
    assert governor.acquire(MODEL, 20) == 0.0
    assert 0.05 < governor.acquire(MODEL, 30) <= 0.31  # 80 would be 0.8 s ahead: wait for 0.3 s of it


def test_a_prompt_larger_than_the_tolerance_waits_for_an_idle_route_and_then_takes_its_cost(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1000)})
    assert governor.acquire(MODEL, 50_000) == 0.0  # idle: admitted, at a minute's worth (the cap)
    assert 59 < governor.acquire(MODEL, 1) <= 60.1


def test_output_tokens_are_charged_from_the_answer_and_admission_waits_out_the_debt(make_governor):
    governor = make_governor(
        {MODEL: RateLimits(requests_per_minute=10_000, input_tokens_per_minute=1_000_000, output_tokens_per_minute=600)}
    )
    assert governor.acquire(MODEL, 10) == 0.0  # output tokens are not known before the answer
    governor.charge(MODEL, 100)  # 100 of 10 a second: the route is 10 s ahead
    assert 9 < governor.acquire(MODEL, 10) <= 9.6


def test_an_output_token_limit_is_learned_from_anthropic_headers(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=10_000, input_tokens_per_minute=1_000_000)})
    governor.charge(MODEL, 1000)  # no output limit known yet: nothing to charge
    assert governor.acquire(MODEL, 10) == 0.0
    governor.observe_headers(
        MODEL,
        {
            "anthropic-ratelimit-output-tokens-limit": "600",
            "anthropic-ratelimit-output-tokens-remaining": "590",
            "anthropic-ratelimit-output-tokens-reset": rfc3339_in(1),
        },
    )
    governor.charge(MODEL, 100)
    assert governor.acquire(MODEL, 10) > 9


def test_models_are_limited_separately_and_unconfigured_ones_use_the_default(make_governor):
    governor = make_governor(
        {MODEL: RateLimits(requests_per_minute=60, input_tokens_per_minute=1_000_000)},
        default=RateLimits(requests_per_minute=240, input_tokens_per_minute=1_000_000),
        burst_seconds=0.55,
    )
    assert admitted_at_once(governor) == 1  # one a second: one at once
    assert admitted_at_once(governor, "other-model") == 2  # four a second: two in 0.55 s


def test_without_configured_limits_nothing_is_held_back(make_governor):
    governor = make_governor({})
    assert all(governor.acquire(MODEL, 10_000) == 0.0 for _ in range(50))


@pytest.mark.parametrize(
    "headers",
    [
        {"anthropic-ratelimit-requests-limit": "6", "anthropic-ratelimit-requests-remaining": "5",
         "anthropic-ratelimit-requests-reset": rfc3339_in(10)},
        {"x-ratelimit-limit-requests": "6", "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "10s"},
    ],
    ids=["anthropic", "openai"],
)
def test_a_lower_limit_in_the_headers_replaces_the_configured_one(make_governor, headers):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=6000, input_tokens_per_minute=1_000_000)})
    assert admitted_at_once(governor, asks=10) == 10  # 100 a second: 50 at once
    governor.observe_headers(MODEL, headers)
    # 6 a minute, 10 s a call: one more once the 10 taken (0.1 s of the old pace) are past, then 10 s.
    waited = 0.0
    while (wait := governor.acquire(MODEL, 10)) > 0:
        assert wait <= 0.1
        time.sleep(wait)
        waited += wait
    assert waited <= 0.3
    assert 9 < governor.acquire(MODEL, 10) <= 10


def test_online_work_may_use_the_share_batch_work_leaves_it(make_governor, monkeypatch):
    # 120 a minute (0.5 s each), 2.75 s of burst (5 at once), half kept for online work while it is about.
    monkeypatch.setattr(gcra, "ONLINE_ACTIVE_SECONDS", 0.5)
    limits = {MODEL: RateLimits(requests_per_minute=120, input_tokens_per_minute=1_000_000)}
    governor = make_governor(limits, burst_seconds=2.75, online_share=0.5)
    assert admitted_at_once(governor, online=True, asks=1) == 1  # online work is about
    assert admitted_at_once(governor) == 2  # batch: its lane runs at half the rate (1 s each)
    assert admitted_at_once(governor, online=True) == 2  # online: the rest of the shared burst

    time.sleep(3.0)  # the TATs are spent, and online work has not asked for longer than it counts as about
    assert admitted_at_once(governor) == 5  # batch work has the whole limit again
    quiet = make_governor({"other-model": RateLimits(120, 1_000_000)}, burst_seconds=2.75, online_share=0.5)
    assert admitted_at_once(quiet, "other-model", online=True) == 5  # and online work alone uses all of it


def test_without_an_online_share_batch_work_is_not_held_back_for_online_work(make_governor):
    limits = {MODEL: RateLimits(requests_per_minute=120, input_tokens_per_minute=1_000_000)}
    governor = make_governor(limits, burst_seconds=2.75, online_share=0.0)
    assert admitted_at_once(governor, online=True, asks=1) == 1
    assert admitted_at_once(governor) == 4


def test_nothing_left_in_the_provider_window_holds_everyone_until_its_reset(redis_client, key_prefix):
    limits = {MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)}
    observer, other = RedisGovernor(redis_client, key_prefix, limits), RedisGovernor(redis_client, key_prefix, limits)
    observer.observe_headers(
        MODEL,
        {
            "anthropic-ratelimit-input-tokens-limit": "6000",  # 100 a second: 400 more would take 4 s
            "anthropic-ratelimit-input-tokens-remaining": "100",
            "anthropic-ratelimit-input-tokens-reset": rfc3339_in(2),
        },
    )
    assert 1.5 < other.acquire(MODEL, 500) <= 2.0  # 100 tokens left cannot cover 500: wait for the reset
    assert other.acquire(MODEL, 40) == 0.0  # but they cover 40


def test_nothing_left_waits_only_for_what_the_providers_refill_brings_back(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)})
    governor.observe_headers(
        MODEL,
        {
            "x-ratelimit-limit-requests": "600",  # 10 a second, refilled continuously
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1s",  # full again in a second
        },
    )
    assert 0.05 <= governor.acquire(MODEL, 50) <= 0.1  # one request is back in 0.1 s, not a full second


def test_only_news_that_can_hold_a_worker_back_is_written_for_the_fleet(redis_client, key_prefix):
    limits = {MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)}
    one, other = RedisGovernor(redis_client, key_prefix, limits), RedisGovernor(redis_client, key_prefix, limits)

    def tokens(remaining: int, reset_in: float = 30) -> dict[str, str]:
        return {
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-input-tokens-remaining": str(remaining),
            "anthropic-ratelimit-input-tokens-reset": rfc3339_in(reset_in),
        }

    def stored_remaining() -> str:
        return redis_client.hget(f"{key_prefix}:governor-observed:{MODEL}", "tokens:remaining").decode()

    one.observe_headers(MODEL, tokens(39_000))
    assert stored_remaining() == "39000"  # the limit is news the first time
    one.observe_headers(MODEL, tokens(38_000))
    assert stored_remaining() == "39000"  # plenty left, as the store says: not written again
    other.observe_headers(MODEL, tokens(300))  # another worker finds little left: that is written
    # ... and holds the fleet back until the 200 missing have refilled (40,000 a minute: 0.3 s).
    assert stored_remaining() == "300" and 0.25 < other.acquire(MODEL, 500) <= 0.3
    assert one.acquire(MODEL, 500) > 0.2  # ``one`` reads it too ...
    one.observe_headers(MODEL, tokens(39_500, reset_in=60))  # ... so its news that the window refilled is written
    assert stored_remaining() == "39500" and other.acquire(MODEL, 500) == 0.0


def test_stale_provider_news_is_ignored(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)})
    governor.observe_headers(
        MODEL,
        {"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": rfc3339_in(-1)},
    )
    assert governor.acquire(MODEL, 10) == 0.0


def test_headers_from_the_fake_reach_the_governor(client, fake, make_governor):
    fake.configure(requests_limit=2)
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)})
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    governor.observe_headers(MODEL, raw.headers)
    # The fake's limit of 2 a minute replaces the configured 100: one call, then 30 s to the next.
    assert [governor.acquire(MODEL, 10) > 0 for _ in range(3)] == [False, True, True]


def test_token_estimate_is_about_four_characters_per_token():
    assert estimate_tokens("") == 1
    assert estimate_tokens("x" * 4000) == 1001


def test_a_429_holds_the_fleet_once_for_its_retry_after(make_governor):
    first = make_governor({})
    # Two workers sharing Redis; in process, the one governor every thread shares.
    second = first if isinstance(first, InProcessGovernor) else make_governor({})
    assert first.acquire(MODEL, 100) == 0.0
    first.hold(MODEL, 0.6)
    assert 0.4 < second.acquire(MODEL, 100) <= 0.6
    assert make_governor({}).acquire("another-model", 100) == 0.0  # per model
    time.sleep(0.3)
    # A 429 that comes back while the hold runs was sent before it began: it does not extend it.
    second.hold(MODEL, 0.6)
    assert 0.1 < first.acquire(MODEL, 100) <= 0.35
    time.sleep(0.35)
    assert first.acquire(MODEL, 100) == 0.0 and second.acquire(MODEL, 100) == 0.0


def test_the_worker_that_met_the_429_knows_of_the_hold_without_asking_the_store(make_governor):
    governor = make_governor({})
    assert governor.local_hold(MODEL) == 0.0
    governor.hold(MODEL, 0.5)
    assert 0.3 < governor.local_hold(MODEL) <= 0.5
    assert governor.local_hold("another-model") == 0.0
