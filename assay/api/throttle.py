"""The failure throttle: a client that presents too many wrong API keys is refused for a while.

Every wrong key (a bearer key, or the dashboard's sign-in form) counts one failure against the
client that sent it (``assay.api.auth.client_address``: the socket peer, or the client the trusted
proxy forwarded). Once a client has ``ASSAY_AUTH_FAILURES_PER_MINUTE`` failures in the last minute,
every key it presents is refused with 429 and ``Retry-After`` until the oldest of them is a minute old
— the right key too, so guessing cannot go on at full speed and be confirmed later. Requests that
present no key (the session cookie, the trusted proxy's user) are not counted and not held back.

The counts are the ``limits`` library's moving window, in Redis (``ASSAY_REDIS_URL``, keys under
``ASSAY_REDIS_KEY_PREFIX``) so that every API process agrees, and in this process's memory as well.
While Redis cannot be reached each process goes on counting on its own (a client then gets the
limit once per API process), and the API keeps answering; an empty ``ASSAY_REDIS_URL`` counts in
memory only.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from functools import lru_cache

from limits import RateLimitItemPerMinute
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import MovingWindowRateLimiter

from assay.scoring.errors import AssayError
from assay.settings import Settings

log = logging.getLogger(__name__)

# Redis is asked again this long after it failed; meanwhile the process counts on its own.
SHARED_RETRY_SECONDS = 5.0
# A key check must not hang on a Redis that does not answer.
REDIS_TIMEOUT_SECONDS = 0.5
# Clients in one IPv6 /64 are one client: a single host usually holds the whole prefix.
IPV6_CLIENT_PREFIX = 64


class TooManyFailures(AssayError):
    status_code = 429
    code = "too_many_failed_keys"

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"too many wrong API keys from this address; try again in {retry_after} s", retry_after_seconds=retry_after
        )
        self.retry_after = retry_after


def client_key(address: str) -> str:
    """The throttle's name for a client address (an IPv6 address stands for its /64)."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:100] or "unknown"
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(parsed)


class FailureThrottle:
    def __init__(self, per_minute: int, redis_url: str = "", key_prefix: str = "assay") -> None:
        self._item = RateLimitItemPerMinute(per_minute, namespace="auth-failures")
        self._local = MovingWindowRateLimiter(MemoryStorage())
        self._shared: MovingWindowRateLimiter | None = None
        if redis_url:
            storage = RedisStorage(
                redis_url,
                key_prefix=key_prefix,
                wrap_exceptions=True,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
            self._shared = MovingWindowRateLimiter(storage)
        self._shared_down_until = 0.0

    def _limiters(self) -> list[MovingWindowRateLimiter]:
        if self._shared is not None and time.monotonic() >= self._shared_down_until:
            return [self._shared, self._local]
        return [self._local]

    def _shared_failed(self, exc: Exception) -> None:
        if self._shared_down_until <= time.monotonic():
            log.warning("failure throttle: Redis unreachable (%s); counting in this process only", exc)
        self._shared_down_until = time.monotonic() + SHARED_RETRY_SECONDS

    def check(self, address: str) -> None:
        """Raise ``TooManyFailures`` when the client has used up its failures for now."""
        client = client_key(address)
        for limiter in self._limiters():
            try:
                if limiter.test(self._item, client):
                    continue
                reset_at = limiter.get_window_stats(self._item, client).reset_time
            except StorageError as exc:
                self._shared_failed(exc)
                continue
            raise TooManyFailures(max(1, math.ceil(reset_at - time.time())))

    def failed(self, address: str) -> None:
        """Count one wrong key from the client."""
        client = client_key(address)
        for limiter in self._limiters():
            try:
                limiter.hit(self._item, client)
            except StorageError as exc:
                self._shared_failed(exc)


@lru_cache(maxsize=8)
def _throttle(per_minute: int, redis_url: str, key_prefix: str) -> FailureThrottle:
    return FailureThrottle(per_minute, redis_url, key_prefix)


def get_throttle(settings: Settings) -> FailureThrottle:
    """The process's throttle for these settings."""
    return _throttle(settings.auth_failures_per_minute, settings.redis_url, settings.redis_key_prefix)
