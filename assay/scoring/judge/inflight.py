"""A cap on one provider's calls in flight across the whole fleet (``max_in_flight`` in models.yaml).

A local server (vLLM, Ollama) sends no rate-limit headers: what limits it is how many requests it
serves at once. Each call takes a lease before it is sent and gives it back when it ends. A lease
carries its own expiry (the call's timeout plus a margin), so the slots of a worker that died
mid-call come back by themselves. ``RedisInFlight`` shares the cap through Redis (one Lua script
takes a slot atomically); ``InProcessInFlight`` is the same for the embedded mode.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Protocol

import redis

# Past a call's own timeout, how long its lease lives on (a worker's clock and Redis's may differ a little).
LEASE_MARGIN_SECONDS = 30.0


class InFlight(Protocol):
    limit: int

    def take(self, ttl_seconds: float) -> str | None:
        """A lease id when a slot is free (taken for ``ttl_seconds`` at most), else None."""

    def give(self, lease: str) -> None: ...

    def count(self) -> int:
        """Calls in flight now, across the fleet."""


# KEYS[1] the sorted set of leases (score: expiry, server time); ARGV: limit, ttl ms, lease id.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""
_COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""


class RedisInFlight:
    def __init__(self, client: redis.Redis, key_prefix: str, provider: str, limit: int) -> None:
        self.limit = limit
        self._redis = client
        self._key = f"{key_prefix}:inflight:{provider}"
        self._take = client.register_script(_TAKE)
        self._count = client.register_script(_COUNT)

    def take(self, ttl_seconds: float) -> str | None:
        lease = uuid.uuid4().hex
        taken = self._take(keys=[self._key], args=[self.limit, max(1, int(ttl_seconds * 1000)), lease])
        return lease if int(taken) else None

    def give(self, lease: str) -> None:
        self._redis.zrem(self._key, lease)

    def count(self) -> int:
        return int(self._count(keys=[self._key]))


class InProcessInFlight:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._leases: dict[str, float] = {}  # lease -> expiry (monotonic)
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for lease in [lease for lease, until in self._leases.items() if until <= now]:
            del self._leases[lease]

    def take(self, ttl_seconds: float) -> str | None:
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            if len(self._leases) >= self.limit:
                return None
            lease = uuid.uuid4().hex
            self._leases[lease] = now + ttl_seconds
            return lease

    def give(self, lease: str) -> None:
        with self._lock:
            self._leases.pop(lease, None)

    def count(self) -> int:
        with self._lock:
            self._expire(time.monotonic())
            return len(self._leases)
