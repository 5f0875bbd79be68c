"""A rate governor per judge model: requests and input tokens per minute, shared by every worker.

The counting is the ``limits`` library's sliding-window counter (two counters per limit, so a cost
of thousands of tokens is one increment, not thousands of entries), on Redis for the fleet
(``RedisGovernor``) or in memory for the embedded mode (``InProcessGovernor``).

The governor's keys are routes (provider, endpoint and model: ``Provider.route``), shared by the fleet.
The configured limits are a ceiling; the provider's rate-limit response headers (Anthropic's
``anthropic-ratelimit-*``, OpenAI's ``x-ratelimit-*``, both parsed into one ``_Observed`` per limit
by ``parse_ratelimit_headers``) tighten them: a lower ``-limit`` replaces the configured one, and a ``-remaining`` that cannot cover
the next request holds every worker back until the header's ``-reset``. A 429 is the provider saying
"slower" outright: ``hold`` keeps every worker's calls to that model back for its ``retry-after``
(a rate limit is backpressure, so the circuit breaker never counts it). A hold is not extended by
the 429s that come back while it runs: those are calls sent before it began, and telling the fleet
again would stall it for as long as random 429s keep coming.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import redis
from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage, RedisStorage, Storage
from limits.strategies import SlidingWindowCounterRateLimiter

# Anthropic's rule of thumb is about 4 characters of English per token. The estimate only has to
# keep one huge prompt from bursting the token budget; the usage the API reports is what we bill.
CHARS_PER_TOKEN = 4
# Never ask a caller to come back sooner than this: below it, polling costs more than it saves.
MIN_WAIT_SECONDS = 0.05


def estimate_tokens(text: str) -> int:
    return tokens_for_chars(len(text))


def tokens_for_chars(chars: int) -> int:
    """The estimate of a text of ``chars`` characters (it depends on the length only)."""
    return chars // CHARS_PER_TOKEN + 1


@dataclass(frozen=True)
class RateLimits:
    requests_per_minute: int
    input_tokens_per_minute: int

    def __post_init__(self) -> None:
        if self.requests_per_minute < 1 or self.input_tokens_per_minute < 1:
            raise ValueError("rate limits must be positive")


class Governor(Protocol):
    def acquire(self, model: str, tokens: int, requests: int = 1) -> float:
        """Take ``requests`` requests (a group's, at once; 0: tokens only) of ``tokens`` input tokens in
        all: 0.0 when taken, else the seconds to wait first."""

    def observe_headers(self, model: str, headers: Mapping[str, str]) -> None:
        """Learn from a response's ``anthropic-ratelimit-*`` headers (any response, errors included)."""

    def hold(self, model: str, seconds: float) -> None:
        """The provider answered 429: no worker sends ``model`` a call for ``seconds``, unless a hold is
        running already (it is kept as it is)."""


@dataclass(frozen=True)
class _Observed:
    """What the provider last said about one limit: its size, what is left, and when it refills."""

    limit: int | None
    remaining: int | None
    reset_at: float | None


_HEADER_DIMENSIONS = {"requests": "requests", "tokens": "input-tokens"}


def _parse_reset(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _parse_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# OpenAI's reset values are Go durations: "1s", "6m0s", "20ms", "1h2m3.5s".
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: str | None) -> float | None:
    """Seconds in a Go duration (OpenAI's ``x-ratelimit-reset-*``); None when it is not one."""
    if not value:
        return None
    text = value.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def _parse_anthropic(headers: Mapping[str, str]) -> dict[str, _Observed]:
    observed = {}
    for dimension, name in _HEADER_DIMENSIONS.items():
        base = f"anthropic-ratelimit-{name}"
        found = _Observed(
            _parse_int(headers.get(f"{base}-limit")),
            _parse_int(headers.get(f"{base}-remaining")),
            _parse_reset(headers.get(f"{base}-reset")),
        )
        if found != _Observed(None, None, None):
            observed[dimension] = found
    return observed


def _parse_openai(headers: Mapping[str, str], now: float) -> dict[str, _Observed]:
    """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (tokens: prompt plus
    max_tokens, which the judge's admission counts the same way)."""
    observed = {}
    for dimension in ("requests", "tokens"):
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{dimension}"))
        found = _Observed(
            _parse_int(headers.get(f"x-ratelimit-limit-{dimension}")),
            _parse_int(headers.get(f"x-ratelimit-remaining-{dimension}")),
            now + reset if reset is not None else None,
        )
        if found != _Observed(None, None, None):
            observed[dimension] = found
    return observed


def parse_ratelimit_headers(headers: Mapping[str, str], now: float | None = None) -> dict[str, _Observed]:
    """What a response's rate-limit headers say, whichever provider sent them (their names differ, so
    one parser serves every provider and the governor reads one structure)."""
    observed = _parse_anthropic(headers)
    if not observed:
        observed = _parse_openai(headers, time.time() if now is None else now)
    return observed


class _WindowItem(RateLimitItemPerMinute):
    """A per-minute limit whose storage key leaves the amount out, so when response headers tighten
    the limit the requests already counted in this minute still count."""

    def key_for(self, *identifiers: bytes | str | int | float) -> str:
        return "/".join([self.namespace, *(str(i) for i in identifiers)])


class _ObservedStore(Protocol):
    def get(self, model: str) -> tuple[dict[str, _Observed], float]:
        """What the provider last said about the model's limits, and until when (epoch seconds; 0.0:
        not) a 429 holds its calls back."""

    def put(self, model: str, observed: dict[str, _Observed]) -> None: ...

    def hold(self, model: str, until: float, seconds: float) -> None: ...


class _LimitsGovernor:
    def __init__(
        self,
        storage: Storage,
        observed: _ObservedStore,
        limits: Mapping[str, RateLimits],
        default: RateLimits | None,
        namespace: str,
    ) -> None:
        self._limiter = SlidingWindowCounterRateLimiter(storage)
        self._observed = observed
        self._limits = dict(limits)
        self._default = default
        self._namespace = namespace
        # Per model, what could hold a worker back in what this process last read or wrote.
        self._known: dict[str, tuple[tuple[str, int | None, int | None, float | None], ...]] = {}

    def _effective(self, model: str, observed: dict[str, _Observed]) -> tuple[int, int] | None:
        configured = self._limits.get(model, self._default)
        if configured is None:
            return None
        requests, tokens = configured.requests_per_minute, configured.input_tokens_per_minute
        if (seen := observed.get("requests")) and seen.limit:
            requests = min(requests, seen.limit)
        if (seen := observed.get("tokens")) and seen.limit:
            tokens = min(tokens, seen.limit)
        return requests, tokens

    def acquire(self, model: str, tokens: int, requests: int = 1) -> float:
        now = time.time()
        observed, held_until = self._observed.get(model)
        self._known[model] = _binding(observed)
        provider_wait = max(_provider_wait(observed, tokens, now, requests), held_until - now)
        if provider_wait > 0:
            return max(provider_wait, MIN_WAIT_SECONDS)
        effective = self._effective(model, observed)
        if effective is None:
            return 0.0
        requests_item = _WindowItem(effective[0], namespace=f"{self._namespace}:requests")
        tokens_item = _WindowItem(effective[1], namespace=f"{self._namespace}:input-tokens")
        # A prompt bigger than the whole budget takes the whole budget rather than waiting forever.
        cost = max(1, min(tokens, tokens_item.amount))
        if not self._limiter.test(tokens_item, model, cost=cost):
            return self._wait(tokens_item, model)
        # More requests than the whole budget take the whole budget (a group larger than the limit).
        if requests > 0 and not self._limiter.hit(requests_item, model, cost=min(requests, requests_item.amount)):
            return self._wait(requests_item, model)
        if not self._limiter.hit(tokens_item, model, cost=cost):
            # Another worker took the tokens between test and hit. The request slot just taken stays
            # spent: erring towards fewer calls is the safe side of a rate limit.
            return self._wait(tokens_item, model)
        return 0.0

    def _wait(self, item: _WindowItem, model: str) -> float:
        reset_at = self._limiter.get_window_stats(item, model).reset_time
        return min(float(item.get_expiry()), max(MIN_WAIT_SECONDS, reset_at - time.time()))

    def hold(self, model: str, seconds: float) -> None:
        if seconds > 0:
            self._observed.hold(model, time.time() + seconds, seconds)

    def observe_headers(self, model: str, headers: Mapping[str, str]) -> None:
        observed = parse_ratelimit_headers(headers)
        # Most responses say only that plenty is left, as the store already does: writing that again
        # (every call, from every worker) would cost a round trip per call and tell nobody anything.
        if observed and _binding(observed) != self._known.get(model):
            self._observed.put(model, observed)
            self._known[model] = _binding(observed)


# Below this share of its limit, what the provider says is left (and when it refills) is news that
# may hold a worker back; above it, only the limit itself matters.
LOW_REMAINING_SHARE = 0.25


def _binding(observed: dict[str, _Observed]) -> tuple[tuple[str, int | None, int | None, float | None], ...]:
    """What in an observation could hold a worker back: each limit, and what is left (with its reset)
    once that is low."""
    binding = []
    for dimension, seen in sorted(observed.items()):
        low = seen.remaining is not None and (seen.limit is None or seen.remaining < seen.limit * LOW_REMAINING_SHARE)
        binding.append((dimension, seen.limit, seen.remaining if low else None, seen.reset_at if low else None))
    return tuple(binding)


def _provider_wait(observed: dict[str, _Observed], tokens: int, now: float, requests: int = 1) -> float:
    """Seconds until the provider's own window refills, when what it said is left cannot cover us."""
    wait = 0.0
    for dimension, needed in (("requests", requests), ("tokens", tokens)):
        seen = observed.get(dimension)
        if seen is None or seen.remaining is None or seen.reset_at is None or seen.reset_at <= now:
            continue
        # A request larger than the provider's whole limit can only wait for a full window.
        needed = min(needed, seen.limit) if seen.limit else needed
        if seen.remaining < needed:
            wait = max(wait, seen.reset_at - now)
    return max(wait, MIN_WAIT_SECONDS) if wait > 0 else 0.0


# --- Redis -----------------------------------------------------------------------------------------

_OBSERVED_TTL_SECONDS = 120  # header news older than two windows says nothing about now




class _RedisObserved:
    def __init__(self, client: redis.Redis, key_prefix: str) -> None:
        self._redis = client
        self._prefix = key_prefix

    def _key(self, model: str) -> str:
        return f"{self._prefix}:governor-observed:{model}"

    def _hold_key(self, model: str) -> str:
        return f"{self._prefix}:governor-hold:{model}"

    def get(self, model: str) -> tuple[dict[str, _Observed], float]:
        with self._redis.pipeline(transaction=False) as pipe:  # one round trip for both
            pipe.hgetall(self._key(model))
            pipe.get(self._hold_key(model))
            fields, held_until = pipe.execute()
        raw = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()
        }
        observed = {}
        for dimension in _HEADER_DIMENSIONS:
            if f"{dimension}:seen" not in raw:
                continue
            observed[dimension] = _Observed(
                _parse_int(raw.get(f"{dimension}:limit")),
                _parse_int(raw.get(f"{dimension}:remaining")),
                float(raw[f"{dimension}:reset_at"]) if f"{dimension}:reset_at" in raw else None,
            )
        return observed, float(held_until) if held_until is not None else 0.0

    def hold(self, model: str, until: float, seconds: float) -> None:
        # NX: a running hold is kept; the key expires with it.
        self._redis.set(self._hold_key(model), repr(until), px=max(1, math.ceil(seconds * 1000)), nx=True)

    def put(self, model: str, observed: dict[str, _Observed]) -> None:
        mapping: dict[str, str] = {}
        for dimension, seen in observed.items():
            mapping[f"{dimension}:seen"] = "1"
            for field, value in (("limit", seen.limit), ("remaining", seen.remaining), ("reset_at", seen.reset_at)):
                if value is not None:
                    mapping[f"{dimension}:{field}"] = str(value)
        key = self._key(model)
        with self._redis.pipeline() as pipe:
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, _OBSERVED_TTL_SECONDS)
            pipe.execute()


class RedisGovernor(_LimitsGovernor):
    """Limits shared by every worker through Redis (the ``limits`` library's Redis storage)."""

    def __init__(
        self,
        redis_client: redis.Redis,
        key_prefix: str,
        limits: Mapping[str, RateLimits],
        *,
        default: RateLimits | None = None,
    ) -> None:
        storage = RedisStorage("redis://", connection_pool=redis_client.connection_pool, key_prefix=key_prefix)
        # The storage puts ``key_prefix`` in front of every counter key it writes.
        super().__init__(storage, _RedisObserved(redis_client, key_prefix), limits, default, "governor")


# --- in process ------------------------------------------------------------------------------------


class _MemoryObserved:
    def __init__(self) -> None:
        self._by_model: dict[str, dict[str, _Observed]] = {}
        self._held_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def get(self, model: str) -> tuple[dict[str, _Observed], float]:
        with self._lock:
            return dict(self._by_model.get(model, {})), self._held_until.get(model, 0.0)

    def hold(self, model: str, until: float, seconds: float) -> None:
        with self._lock:
            if self._held_until.get(model, 0.0) <= time.time():  # a running hold is kept
                self._held_until[model] = until

    def put(self, model: str, observed: dict[str, _Observed]) -> None:
        with self._lock:
            self._by_model.setdefault(model, {}).update(observed)


class InProcessGovernor(_LimitsGovernor):
    """The same governor for one process (embedded mode), on the ``limits`` library's memory storage."""

    def __init__(self, limits: Mapping[str, RateLimits], *, default: RateLimits | None = None) -> None:
        super().__init__(MemoryStorage(), _MemoryObserved(), limits, default, "governor")
