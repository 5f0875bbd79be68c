"""Rate limits the way providers enforce them, shared by the loopback fakes of both APIs.

Each limit is a token bucket refilled continuously at ``per_minute / 60`` a second and holding at most
``burst_seconds`` of that (Anthropic documents a bucket "continuously replenished up to your maximum
limit" and enforcement over shorter intervals, such as one second, than the minute it states). A request
the buckets can cover takes from all of them at once; one they cannot is refused with 429 and a
``retry-after`` saying when they will (fractional seconds, so a client told the truth can use it).

Output tokens are reserved at ``max_tokens`` when a request arrives and the unused part is given back
when it is answered, as Anthropic estimates and corrects its output-token limit. What the headers
report: ``-limit`` the per-minute figure, ``-remaining`` what the bucket holds now (what could be sent
without a 429), ``-reset`` when it is full again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass
class TokenBucket:
    per_minute: int
    burst_seconds: float
    level: float = field(init=False)
    updated: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.level = self.capacity

    @property
    def capacity(self) -> float:
        # At least one request's worth, however small the limit: a limit of 10 a minute still admits one.
        return max(1.0, self.per_minute * self.burst_seconds / 60.0)

    @property
    def rate(self) -> float:
        return self.per_minute / 60.0

    def refill(self, now: float) -> None:
        if self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def shortfall_seconds(self, amount: float, now: float) -> float:
        """0 when ``amount`` can be taken now, else the seconds until it can (an amount larger than the
        bucket waits for a full bucket, and takes it)."""
        self.refill(now)
        needed = min(amount, self.capacity) - self.level
        return max(0.0, needed / self.rate)

    def take(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level -= amount

    def give(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level = min(self.capacity, self.level + amount)

    def remaining(self, now: float) -> int:
        self.refill(now)
        return max(0, math.floor(self.level))

    def reset_in(self, now: float) -> float:
        """Seconds until the bucket is full again."""
        self.refill(now)
        return max(0.0, (self.capacity - self.level) / self.rate)


@dataclass(frozen=True)
class Costs:
    """What one request takes: itself, its input tokens, and the output tokens it reserves (max_tokens)."""

    requests: int = 1
    input_tokens: int = 0
    output_tokens: int = 0


class ProviderLimits:
    """A provider's buckets, by dimension (``requests``, ``input_tokens``, ``output_tokens`` or OpenAI's
    combined ``tokens``); a dimension without a limit is not tracked."""

    def __init__(self, limits: dict[str, int], burst_seconds: float) -> None:
        self.buckets = {name: TokenBucket(limit, burst_seconds) for name, limit in limits.items()}

    def _amounts(self, costs: Costs) -> dict[str, float]:
        return {
            "requests": costs.requests,
            "input_tokens": costs.input_tokens,
            "output_tokens": costs.output_tokens,
            "tokens": costs.input_tokens + costs.output_tokens,
        }

    def admit(self, costs: Costs, now: float, *, enforce: bool) -> float:
        """Take ``costs`` from every bucket and return 0.0, or (``enforce`` and one cannot cover them)
        take nothing and return the seconds until all can: the request's retry-after."""
        amounts = self._amounts(costs)
        if enforce:
            wait = max((b.shortfall_seconds(amounts[n], now) for n, b in self.buckets.items()), default=0.0)
            if wait > 0:
                return wait
        for name, bucket in self.buckets.items():
            bucket.take(amounts[name], now)
        return 0.0

    def give_back(self, dimension: str, amount: float, now: float) -> None:
        """Return what a request reserved and did not use (output tokens under max_tokens)."""
        for name in (dimension, "tokens") if dimension == "output_tokens" else (dimension,):
            if name in self.buckets and amount > 0:
                self.buckets[name].give(amount, now)

    def state(self, now: float) -> dict[str, tuple[int, int, float]]:
        """(limit, remaining, seconds until full) of each dimension."""
        return {n: (b.per_minute, b.remaining(now), b.reset_in(now)) for n, b in self.buckets.items()}


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def go_duration(seconds: float) -> str:
    """A Go duration, as OpenAI writes its resets: "20ms", "1s", "6m0s"."""
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    rest = round(rest, 3)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


_ANTHROPIC_NAMES = {"requests": "requests", "input_tokens": "input-tokens", "output_tokens": "output-tokens"}


def anthropic_headers(limits: ProviderLimits, now: float) -> dict[str, str]:
    headers = {}
    for dimension, (limit, remaining, reset_in) in limits.state(now).items():
        base = f"anthropic-ratelimit-{_ANTHROPIC_NAMES[dimension]}"
        headers[f"{base}-limit"] = str(limit)
        headers[f"{base}-remaining"] = str(remaining)
        headers[f"{base}-reset"] = rfc3339(now + reset_in)
    return headers


def openai_headers(limits: ProviderLimits, now: float) -> dict[str, str]:
    headers = {}
    for dimension, (limit, remaining, reset_in) in limits.state(now).items():
        headers[f"x-ratelimit-limit-{dimension}"] = str(limit)
        headers[f"x-ratelimit-remaining-{dimension}"] = str(remaining)
        headers[f"x-ratelimit-reset-{dimension}"] = go_duration(reset_in)
    return headers


def retry_after(seconds: float) -> str:
    """The retry-after header's value: seconds, rounded up to the millisecond (never 0)."""
    return f"{max(0.001, math.ceil(seconds * 1000) / 1000):g}"


def add_limit_options(parser: Any, defaults: Any) -> None:
    """The command-line options of a fake run as its own process (benchmarks): every ``*_limit`` field
    of its config, the burst and whether the limits are enforced."""
    for name in defaults.model_fields:
        if name.endswith("_limit"):
            parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--burst-seconds", type=float, default=defaults.burst_seconds)
    parser.add_argument("--enforce-limits", action="store_true", help="answer 429 to what the buckets cannot cover")


def limit_options(args: Any) -> dict[str, Any]:
    return {n: v for n, v in vars(args).items() if n.endswith("_limit") or n in ("burst_seconds", "enforce_limits")}
