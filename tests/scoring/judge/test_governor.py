"""The rate governor: configured limits shared through Redis, tightened by the provider's headers."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import redis

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


def test_two_workers_sharing_redis_stay_under_the_requests_per_minute(redis_client, key_prefix):
    limits = {MODEL: RateLimits(requests_per_minute=5, input_tokens_per_minute=1_000_000)}
    other_connection = redis.Redis(host="127.0.0.1", port=6379, db=15, decode_responses=True)
    fleet = [RedisGovernor(redis_client, key_prefix, limits), RedisGovernor(other_connection, key_prefix, limits)]

    waits = [fleet[i % 2].acquire(MODEL, 100) for i in range(20)]

    assert waits.count(0.0) == 5
    assert all(0 < w <= 60 for w in waits if w)
    assert waits[:5] == [0.0] * 5  # the first five went through, whichever worker asked


def test_input_tokens_per_minute(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1000)})
    assert governor.acquire(MODEL, 600) == 0.0
    assert governor.acquire(MODEL, 600) > 0  # would make 1200
    assert governor.acquire(MODEL, 300) == 0.0  # 900 fits


def test_a_prompt_larger_than_the_budget_takes_all_of_it(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1000)})
    assert governor.acquire(MODEL, 50_000) == 0.0
    assert governor.acquire(MODEL, 1) > 0


def test_models_are_limited_separately_and_unconfigured_ones_use_the_default(make_governor):
    governor = make_governor(
        {MODEL: RateLimits(requests_per_minute=1, input_tokens_per_minute=10_000)},
        default=RateLimits(requests_per_minute=2, input_tokens_per_minute=10_000),
    )
    assert governor.acquire(MODEL, 10) == 0.0
    assert governor.acquire(MODEL, 10) > 0
    assert governor.acquire("other-model", 10) == 0.0
    assert governor.acquire("other-model", 10) == 0.0
    assert governor.acquire("other-model", 10) > 0


def test_without_configured_limits_nothing_is_held_back(make_governor):
    governor = make_governor({})
    assert all(governor.acquire(MODEL, 10_000) == 0.0 for _ in range(50))


def test_a_lower_limit_in_the_headers_tightens_the_configured_one(make_governor):
    governor = make_governor({MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)})
    assert governor.acquire(MODEL, 10) == 0.0  # counted before the tightening, and still counted after it
    governor.observe_headers(
        MODEL,
        {
            "anthropic-ratelimit-requests-limit": "3",
            "anthropic-ratelimit-requests-remaining": "2",
            "anthropic-ratelimit-requests-reset": rfc3339_in(60),
        },
    )
    waits = [governor.acquire(MODEL, 10) for _ in range(4)]
    assert waits[:2] == [0.0, 0.0] and waits[2] > 0 and waits[3] > 0


def test_nothing_left_in_the_provider_window_holds_everyone_until_its_reset(redis_client, key_prefix):
    limits = {MODEL: RateLimits(requests_per_minute=100, input_tokens_per_minute=1_000_000)}
    observer, other = RedisGovernor(redis_client, key_prefix, limits), RedisGovernor(redis_client, key_prefix, limits)
    observer.observe_headers(
        MODEL,
        {
            "anthropic-ratelimit-input-tokens-limit": "50000",
            "anthropic-ratelimit-input-tokens-remaining": "100",
            "anthropic-ratelimit-input-tokens-reset": rfc3339_in(2),
        },
    )
    assert 1.5 < other.acquire(MODEL, 500) <= 2.0  # 100 tokens left cannot cover 500
    assert other.acquire(MODEL, 50) == 0.0  # but they cover 50


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
    assert stored_remaining() == "300" and other.acquire(MODEL, 500) > 25  # and holds the fleet back
    assert one.acquire(MODEL, 500) > 25  # ``one`` reads it too ...
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
    # The fake's limit of 2 a minute replaces the configured 100.
    assert [governor.acquire(MODEL, 10) > 0 for _ in range(3)] == [False, False, True]


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
