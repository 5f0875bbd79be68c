"""Fixtures for the judge tests: the loopback fake, SDK clients pointed at it, and a private slice of the
shared Redis (database 15, a unique key prefix per test, deleted afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
import redis

from assay.scoring.judge.breaker import InProcessBreaker, RedisBreaker
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.retry import RetryPolicy
from assay.scoring.judge.providers.anthropic_messages import AnthropicProvider, make_batch_client, make_client
from assay.scoring.judge.providers.openai_chat import OpenAIProvider
from assay.scoring.judge.providers.openai_chat import make_client as openai_make_client
from assay.scoring.suites.catalog import ModelPrice, load_model_catalog
from assay.scoring.suites.providers import ProviderConfig
from assay.settings import REPO_ROOT
from tests.fakes.anthropic_server import FakeAnthropic, FakeControl
from tests.fakes.openai_server import FakeOpenAI

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


# --- both providers ----------------------------------------------------------------------------------

OPENAI_MODEL = "gpt-4.1-mini"


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAI) -> FakeOpenAI:
    fake_openai_server.reset()
    return fake_openai_server


def openai_provider(fake: FakeOpenAI, **config: object) -> OpenAIProvider:
    """An OpenAI-compatible provider as models.yaml declares one, pointed at the fake."""
    settings = ProviderConfig(type="openai_compatible", default_model=OPENAI_MODEL, **config)  # type: ignore[arg-type]
    return OpenAIProvider("openai", settings, openai_make_client("test-key", fake.api_base, timeout=5.0))


@dataclass
class ProviderCase:
    """One provider under test: its fake, the provider the judge calls, a model and its price."""

    name: str
    fake: FakeControl
    provider: Any
    model: str
    price: ModelPrice


@pytest.fixture(params=["anthropic", "openai"])
def provider_case(request: pytest.FixtureRequest) -> Iterator[ProviderCase]:
    catalog = load_model_catalog(REPO_ROOT / "config")
    if request.param == "anthropic":
        fake = request.getfixturevalue("fake")
        provider: Any = AnthropicProvider("anthropic", make_client("test-key", fake.base_url, timeout=5.0))
        case = ProviderCase("anthropic", fake, provider, MODEL, catalog.models[MODEL])
    else:
        fake = request.getfixturevalue("fake_openai")
        provider = openai_provider(fake)
        case = ProviderCase("openai", fake, provider, OPENAI_MODEL, catalog.models[OPENAI_MODEL])
    yield case
    judge_loop().run(provider.close())
