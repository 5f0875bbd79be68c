"""A rate governor per judge route: requests, input tokens and output tokens per minute, shared by
every worker, spreading admissions evenly at each limit's rate instead of admitting them in bursts.

The pacing is GCRA (``gcra.py``): a small burst tolerance (``judge_burst_seconds``) and otherwise one
admission every ``60 / limit`` seconds per request (or token), on Redis for the fleet
(``RedisGovernor``) or in memory for the embedded mode (``InProcessGovernor``). Requests and input
tokens (the prompt's estimate; for OpenAI the prompt plus max_tokens, as it counts) are taken before a
call; output tokens, unknown until the answer, are charged from its usage afterwards, so a call is
admitted only while the output budget is not in debt beyond the tolerance (the overshoot is bounded
by the output of the calls in flight). Online work may use the whole limit; batch work only
``1 - online_share`` of it while online work is about (``gcra.py``).

The governor's keys are routes (provider, endpoint and model: ``Provider.route``), shared by the fleet.
The configured limits are a ceiling; the provider's rate-limit response headers (Anthropic's
``anthropic-ratelimit-*``, OpenAI's ``x-ratelimit-*``, both parsed into one ``_Observed`` per limit
by ``parse_ratelimit_headers``) tighten them: a lower ``-limit`` replaces the configured one (a limit
configured for none, such as output tokens, is learned), and a ``-remaining`` that cannot cover the
next request holds every worker back until the header's ``-reset``. A 429 is the provider saying
"slower" outright: ``hold`` keeps every worker's calls to that model back for its ``retry-after``
(a rate limit is backpressure, so the circuit breaker never counts it). The worker that met the 429
knows at once (a hold kept in the process, read by every call it makes, its groups' passes included);
the rest of the fleet reads it from Redis on its next ask. A hold is not extended by the 429s that
come back while it runs: those are calls sent before it began, and telling the fleet again would stall
it for as long as random 429s keep coming.
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

from assay.scoring.judge.gcra import Cost, MemoryPacer, Pacer, RedisPacer

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


# The pacing's burst tolerance and the online share when the caller names none (settings name them).
DEFAULT_BURST_SECONDS = 0.5
DEFAULT_ONLINE_SHARE = 0.2


@dataclass(frozen=True)
class RateLimits:
    requests_per_minute: int
    input_tokens_per_minute: int
    output_tokens_per_minute: int | None = None  # None: only what the provider's headers say

    def __post_init__(self) -> None:
        if self.requests_per_minute < 1 or self.input_tokens_per_minute < 1 or (self.output_tokens_per_minute or 1) < 1:
            raise ValueError("rate limits must be positive")


class Governor(Protocol):
    def acquire(self, model: str, tokens: int, requests: int = 1, *, online: bool = False) -> float:
        """Take ``requests`` requests (a group's, at once; 0: tokens only) of ``tokens`` input tokens in
        all: 0.0 when taken, else the seconds to wait first. ``online``: for online work, which may use
        the share of the limit batch work leaves it."""

    def charge(self, model: str, output_tokens: int, *, online: bool = False) -> None:
        """Count an answer's output tokens against the output-token limit (known only afterwards)."""

    def local_hold(self, model: str) -> float:
        """Seconds a hold this process knows of still keeps ``model``'s calls back (no round trip)."""

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


# The governor's dimensions and Anthropic's names for them; OpenAI's ``tokens`` (prompt plus max_tokens)
# is the governor's ``tokens`` too.
_HEADER_DIMENSIONS = {"requests": "requests", "tokens": "input-tokens", "output-tokens": "output-tokens"}


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


class _ObservedStore(Protocol):
    def get(self, model: str) -> tuple[dict[str, _Observed], float]:
        """What the provider last said about the model's limits, and until when (epoch seconds; 0.0:
        not) a 429 holds its calls back."""

    def put(self, model: str, observed: dict[str, _Observed]) -> None: ...

    def hold(self, model: str, until: float, seconds: float) -> None: ...


class _PacedGovernor:
    def __init__(
        self,
        pacer: Pacer,
        observed: _ObservedStore,
        limits: Mapping[str, RateLimits],
        default: RateLimits | None,
    ) -> None:
        self._pacer = pacer
        self._observed = observed
        self._limits = dict(limits)
        self._default = default
        # Per model, what could hold a worker back in what this process last read or wrote.
        self._known: dict[str, tuple[tuple[str, int | None, int | None, float | None], ...]] = {}
        # Holds this process set or read, known to all of its calls at once (no round trip).
        self._local_holds: dict[str, float] = {}

    def _effective(self, model: str, observed: dict[str, _Observed]) -> dict[str, int]:
        """Each limit (per minute) that applies: the configured one, lowered by the provider's headers."""
        configured = self._limits.get(model, self._default)
        if configured is None:
            return {}
        limits = {
            "requests": configured.requests_per_minute,
            "tokens": configured.input_tokens_per_minute,
            "output-tokens": configured.output_tokens_per_minute,
        }
        for dimension, seen in observed.items():
            if seen.limit:
                current = limits.get(dimension)
                limits[dimension] = min(current, seen.limit) if current else seen.limit
        return {dimension: limit for dimension, limit in limits.items() if limit}

    def local_hold(self, model: str) -> float:
        return max(0.0, self._local_holds.get(model, 0.0) - time.time())

    def acquire(self, model: str, tokens: int, requests: int = 1, *, online: bool = False) -> float:
        now = time.time()
        observed, held_until = self._observed.get(model)
        self._known[model] = _binding(observed)
        if held_until > self._local_holds.get(model, 0.0):
            self._local_holds[model] = held_until
        held_until = max(held_until, self._local_holds.get(model, 0.0))
        provider_wait = max(_provider_wait(observed, tokens, now, requests), held_until - now)
        if provider_wait > 0:
            return max(provider_wait, MIN_WAIT_SECONDS)
        limits = self._effective(model, observed)
        asked = {"requests": requests, "tokens": tokens, "output-tokens": 0}  # output: charged after the answer
        # An ask larger than a whole minute's limit (a huge prompt, a group larger than the limit) takes a
        # minute's worth rather than waiting forever. A dimension asked for nothing is not asked (a group's
        # tokens-only top-up), but output tokens always are: a call waits while their budget is in debt.
        costs = [
            Cost(d, 60.0 / limit, min(asked[d], limit))
            for d, limit in limits.items()
            if asked[d] > 0 or d == "output-tokens"
        ]
        if not costs:
            return 0.0
        if requests > 1 and any(c.amount * c.interval > self._pacer.tolerance for c in costs):
            # A group that would be a burst by itself is not admitted whole (the route being idle admits
            # one call larger than the tolerance, not a group's): its calls ask one by one.
            return max(min(c.interval for c in costs), MIN_WAIT_SECONDS)
        wait = self._pacer.admit(model, costs, online=online)
        return max(wait, MIN_WAIT_SECONDS) if wait > 0 else 0.0

    def charge(self, model: str, output_tokens: int, *, online: bool = False) -> None:
        limit = self._effective(model, self._observed.get(model)[0]).get("output-tokens")
        if limit and output_tokens > 0:
            self._pacer.charge(model, [Cost("output-tokens", 60.0 / limit, output_tokens)], online=online)

    def hold(self, model: str, seconds: float) -> None:
        if seconds <= 0:
            return
        now = time.time()
        # This process's calls see the hold at once; the store tells the rest of the fleet.
        if self._local_holds.get(model, 0.0) <= now:
            self._local_holds[model] = now + seconds
        self._observed.hold(model, now + seconds, seconds)

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
    """Seconds until the provider can cover us, when what it said is left cannot: until its ``-reset``
    (when it is full again), or sooner, when its limit says how fast it refills: both providers refill
    their buckets continuously at the limit's rate, so the shortfall is back after ``shortfall * 60 /
    limit`` seconds, and waiting for a full bucket would idle the route for up to a whole burst."""
    wait = 0.0
    # Output tokens are charged after the answer: any room at all covers a call's ask.
    for dimension, needed in (("requests", requests), ("tokens", tokens), ("output-tokens", 1)):
        seen = observed.get(dimension)
        if seen is None or seen.remaining is None or seen.reset_at is None or seen.reset_at <= now:
            continue
        # A request larger than the provider's whole limit can only wait for a full window.
        needed = min(needed, seen.limit) if seen.limit else needed
        if seen.remaining < needed:
            refilled = (needed - seen.remaining) * 60.0 / seen.limit if seen.limit else math.inf
            wait = max(wait, min(seen.reset_at - now, refilled))
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


class RedisGovernor(_PacedGovernor):
    """Limits shared by every worker through Redis (one GCRA script per ask, ``gcra.RedisPacer``)."""

    def __init__(
        self,
        redis_client: redis.Redis,
        key_prefix: str,
        limits: Mapping[str, RateLimits],
        *,
        default: RateLimits | None = None,
        burst_seconds: float = DEFAULT_BURST_SECONDS,
        online_share: float = DEFAULT_ONLINE_SHARE,
    ) -> None:
        pacer = RedisPacer(redis_client, key_prefix, burst_seconds, online_share)
        super().__init__(pacer, _RedisObserved(redis_client, key_prefix), limits, default)


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


class InProcessGovernor(_PacedGovernor):
    """The same governor for one process (embedded mode), paced in memory (``gcra.MemoryPacer``)."""

    def __init__(
        self,
        limits: Mapping[str, RateLimits],
        *,
        default: RateLimits | None = None,
        burst_seconds: float = DEFAULT_BURST_SECONDS,
        online_share: float = DEFAULT_ONLINE_SHARE,
    ) -> None:
        super().__init__(MemoryPacer(burst_seconds, online_share), _MemoryObserved(), limits, default)
