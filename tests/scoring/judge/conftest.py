"""Fixtures for the judge tests: the loopback fake, SDK clients pointed at it, and a private slice of the
shared Redis (database 15, a unique key prefix per test, deleted afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anthropic
import pytest
import redis

from assay.scoring.judge.breaker import InProcessBreaker, RedisBreaker
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.retry import RetryPolicy
from assay.scoring.judge.service import make_batch_client, make_client
from assay.scoring.suites.loader import ModelPrice, load_model_catalog
from assay.settings import REPO_ROOT
from tests.fakes.anthropic_server import FakeAnthropic

MODEL = "claude-haiku-5-5"
# Backoff steps of 10, 20, 40 ms: the same schedule as production's 1/2/4 s, a hundred times faster.
FAST_POLICY = RetryPolicy(backoff_base_seconds=0.01, jitter_ratio=0.5, max_inline_wait_seconds=5.0)


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeAnthropic) -> FakeAnthropic:
    fake_server.reset()
    return fake_server


@pytest.fixture
def client(fake: FakeAnthropic) -> Iterator[anthropic.Anthropic]:
    """A synchronous SDK client, for the fake's own tests."""
    sdk = make_batch_client("test-key", fake.base_url, timeout=5.0)
    yield sdk
    sdk.close()


@pytest.fixture
def judge_client(fake: FakeAnthropic) -> Iterator[anthropic.AsyncAnthropic]:
    """The judge's client, as a worker makes it: asynchronous, used on the process's judge loop."""
    sdk = make_client("test-key", fake.base_url, timeout=5.0)
    yield sdk
    judge_loop().run(sdk.close())


@pytest.fixture(scope="session")
def price() -> ModelPrice:
    return load_model_catalog(REPO_ROOT / "config").models[MODEL]


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis(host="127.0.0.1", port=6379, db=15)
    yield client
    client.close()


@pytest.fixture
def key_prefix(redis_client: redis.Redis) -> Iterator[str]:
    prefix = f"assay-test-judge-{uuid.uuid4().hex}"
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(params=["redis", "in_process"])
def make_breaker(request: pytest.FixtureRequest, redis_client: redis.Redis, key_prefix: str):
    """Builds breakers of one kind; Redis ones made by the same test share their state, like a fleet."""

    def build(**kwargs):
        if request.param == "redis":
            return RedisBreaker(redis_client, key_prefix, **kwargs)
        return InProcessBreaker(**kwargs)

    build.kind = request.param
    return build
