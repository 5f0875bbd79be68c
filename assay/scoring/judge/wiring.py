"""Builds the judge's providers, and the shared breaker and rate governor, from settings: Redis-backed
when a Redis URL is set (shared by every worker and readable by the API), in-process otherwise
(embedded mode)."""

from __future__ import annotations

from typing import Any

from assay.scoring.judge.breaker import InProcessBreaker, RedisBreaker
from assay.scoring.judge.governor import InProcessGovernor, RateLimits, RedisGovernor
from assay.scoring.judge.providers.base import BatchAPI
from assay.scoring.judge.providers.registry import (
    ProviderRegistry,
    build_batch_apis,
    build_registry,
    in_process_in_flight,
    redis_in_flight,
)
from assay.scoring.suites.loader import ModelCatalog
from assay.settings import Settings


def _redis(settings: Settings) -> Any:
    import redis

    return redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)


def build_breaker(settings: Settings) -> RedisBreaker | InProcessBreaker:
    options = dict(threshold=settings.breaker_threshold, cooldown_seconds=settings.breaker_cooldown_seconds)
    if settings.redis_url:
        return RedisBreaker(_redis(settings), settings.redis_key_prefix, **options)
    return InProcessBreaker(**options)


def build_providers(settings: Settings, catalog: ModelCatalog) -> ProviderRegistry:
    """Every provider of the catalog this process has a key for; caps on calls in flight shared by the fleet."""
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    if settings.redis_url:
        in_flight = redis_in_flight(_redis(settings), settings.redis_key_prefix)
    else:
        in_flight = in_process_in_flight()
    return build_registry(catalog, anthropic_key=key, anthropic_base_url=settings.anthropic_base_url, in_flight=in_flight)


def batch_apis(settings: Settings, catalog: ModelCatalog) -> dict[str, BatchAPI]:
    """The batch API of every provider this process has a key for and that has one (the batch lane)."""
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    return build_batch_apis(catalog, anthropic_key=key, anthropic_base_url=settings.anthropic_base_url)


def governor_limits(catalog: ModelCatalog, providers: ProviderRegistry) -> dict[str, RateLimits]:
    """The configured limits of every priced model, by route (provider, endpoint and model)."""
    limits = {}
    for provider in providers:
        for name, model in catalog.models.items():
            if model.provider == provider.name:
                limits[provider.route(name)] = RateLimits(
                    model.requests_per_minute, model.input_tokens_per_minute, model.output_tokens_per_minute
                )
    return limits


def build_governor(
    settings: Settings, catalog: ModelCatalog, providers: ProviderRegistry
) -> RedisGovernor | InProcessGovernor:
    limits = governor_limits(catalog, providers)
    pacing = dict(burst_seconds=settings.judge_burst_seconds, online_share=settings.online_share)
    if settings.redis_url:
        return RedisGovernor(_redis(settings), settings.redis_key_prefix, limits, **pacing)
    return InProcessGovernor(limits, **pacing)
