"""Builds the shared judge breaker and rate governor from settings: Redis-backed when a Redis URL is
set (shared by every worker and readable by the API), in-process otherwise (embedded mode)."""

from __future__ import annotations

from typing import Any

from assay.scoring.judge.breaker import InProcessBreaker, RedisBreaker
from assay.scoring.judge.governor import InProcessGovernor, RateLimits, RedisGovernor
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


def build_governor(settings: Settings, catalog: ModelCatalog) -> RedisGovernor | InProcessGovernor:
    limits = {name: RateLimits(m.requests_per_minute, m.input_tokens_per_minute) for name, m in catalog.models.items()}
    if settings.redis_url:
        return RedisGovernor(_redis(settings), settings.redis_key_prefix, limits)
    return InProcessGovernor(limits)
