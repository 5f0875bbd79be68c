"""The fakes enforce rate limits as providers do (assay/dev/ratelimit.py): token buckets refilled
continuously with about a second of burst, headers on every answer, 429 with a retry-after that is
true, through the real SDKs."""

from __future__ import annotations

import time
from datetime import datetime

import anthropic
import openai
import pytest

from assay.scoring.judge.governor import parse_duration
from tests.conftest import wait_for
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI
from assay.dev.ratelimit import Costs, ProviderLimits, TokenBucket, go_duration

MODEL = "claude-haiku-5-5"
GPT = "gpt-4.1-mini"


def test_a_bucket_refills_continuously_up_to_its_burst():
    bucket = TokenBucket(per_minute=600, burst_seconds=1.0)  # 10 a second, at most 10 at once
    assert bucket.capacity == 10 and bucket.shortfall_seconds(10, now=100.0) == 0.0
    bucket.take(10, now=100.0)
    assert bucket.shortfall_seconds(1, now=100.0) == pytest.approx(0.1)
    assert bucket.remaining(now=100.25) == 2  # 2.5 refilled, reported whole
    assert bucket.reset_in(now=100.25) == pytest.approx(0.75)
    assert bucket.remaining(now=200.0) == 10  # never more than the burst
    assert TokenBucket(per_minute=10, burst_seconds=1.0).capacity == 1  # a tiny limit still admits one


def test_a_request_the_buckets_cannot_all_cover_takes_from_none():
    limits = ProviderLimits({"requests": 600, "input_tokens": 6000}, burst_seconds=1.0)
    assert limits.admit(Costs(1, 80), now=10.0, enforce=True) == 0.0
    wait = limits.admit(Costs(1, 80), now=10.0, enforce=True)  # 20 tokens left of 100
    assert wait == pytest.approx(0.6)  # 60 more tokens at 100 a second
    assert limits.state(10.0)["requests"][1] == 9  # the refused request took no request either
    assert limits.admit(Costs(1, 80), now=10.0, enforce=False) == 0.0  # not enforced: counted anyway


def test_go_durations_read_back():
    assert [parse_duration(go_duration(s)) for s in (0.02, 1.0, 360.0, 61.5)] == [0.02, 1.0, 360.0, 61.5]


@pytest.fixture
def strict_anthropic():
    # 120 requests a minute enforced over 1 s: 2 at once, one more every 0.5 s.
    with FakeAnthropic(requests_limit=120, output_tokens_limit=60_000, burst_seconds=1.0, enforce_limits=True) as fake:
        yield fake


def ask(client: anthropic.Anthropic, text: str = "x", max_tokens: int = 10):  # type: ignore[no-untyped-def]
    return client.messages.with_raw_response.create(
        model=MODEL, max_tokens=max_tokens, messages=[{"role": "user", "content": text}]
    )


def test_the_anthropic_fake_refuses_past_its_burst_with_a_true_retry_after(strict_anthropic):
    client = anthropic.Anthropic(api_key="test", base_url=strict_anthropic.base_url, max_retries=0)
    first = ask(client)
    assert first.headers["anthropic-ratelimit-requests-limit"] == "120"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "1"
    reset = datetime.fromisoformat(first.headers["anthropic-ratelimit-requests-reset"].replace("Z", "+00:00"))
    assert 0 < reset.timestamp() - time.time() <= 0.5  # full again half a second on
    ask(client)
    with pytest.raises(anthropic.RateLimitError) as refused:
        ask(client)
    retry_after = float(refused.value.response.headers["retry-after"])
    assert 0 < retry_after <= 0.5
    assert refused.value.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    time.sleep(retry_after)
    assert ask(client).http_response.status_code == 200  # told the truth: it goes through then
    calls = strict_anthropic.calls()["calls"]
    assert [c["status"] for c in calls] == [200, 200, 429, 200]


def test_the_anthropic_fake_reserves_max_tokens_of_output_and_gives_back_what_is_unused():
    # 600 output tokens a minute, a minute of burst: 10 a second refill a bucket of 600.
    with FakeAnthropic(output_tokens_limit=600, enforce_limits=True) as fake:
        client = anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0)
        raw = ask(client, max_tokens=500)
        assert raw.headers["anthropic-ratelimit-output-tokens-remaining"] == "100"  # reserved while it runs
        used = raw.parse().usage.output_tokens
        assert used < 500
        later = int(ask(client, max_tokens=1).headers["anthropic-ratelimit-output-tokens-remaining"])
        assert 600 - used - 1 <= later <= 600 - used + 10  # the unused 500 - used came back
        with pytest.raises(anthropic.RateLimitError):
            ask(client, max_tokens=1000)  # more than is left: refused, whatever it would have used


def test_the_openai_fake_counts_prompt_and_max_tokens_and_refuses_with_rate_limit_exceeded():
    # 6,000 tokens a minute over 1 s: 100 tokens at once.
    with FakeOpenAI(tokens_limit=6000, burst_seconds=1.0, enforce_limits=True) as fake:
        client = openai.OpenAI(api_key="test", base_url=fake.api_base, max_retries=0)

        def call(max_tokens: int):  # type: ignore[no-untyped-def]
            return client.chat.completions.with_raw_response.create(
                model=GPT, max_tokens=max_tokens, messages=[{"role": "user", "content": "x" * 40}]
            )

        raw = call(50)  # 10 prompt tokens + 50
        assert raw.headers["x-ratelimit-limit-tokens"] == "6000"
        assert raw.headers["x-ratelimit-remaining-tokens"] == "40"
        assert 0.5 <= parse_duration(raw.headers["x-ratelimit-reset-tokens"]) <= 0.6
        with pytest.raises(openai.RateLimitError) as refused:
            call(50)
        assert refused.value.code == "rate_limit_exceeded"
        retry_after = float(refused.value.response.headers["retry-after"])
        assert 0.1 < retry_after <= 0.2  # 20 tokens short at 100 a second
        wait_for(lambda: fake.calls()["total"] == 2, timeout=10, message="both calls recorded")
        assert [c["status"] for c in fake.calls()["calls"]] == [200, 429]
