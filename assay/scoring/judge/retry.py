"""What is worth retrying, and how long to wait before the next attempt.

``is_transient`` is the one place that decides whether a failed judge call is the provider's
passing trouble (retry it) or a problem that another attempt cannot fix (fail the component at once).
Of the transient ones, ``is_rate_limited`` (a 429) is backpressure for the rate governor and
``is_outage`` (the rest) counts against the circuit breaker. The SDK's own ``max_retries`` is 0 so
retries don't multiply. Both SDKs the providers use (anthropic, openai) raise errors of the same shape
(``APIStatusError`` with the response, ``APIConnectionError``), so one policy serves every provider.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import tenacity

# Error codes the API puts in ``error.details.error_code`` when a 429 means "out of money", not
# "too fast": waiting a few seconds does not refill a spend limit.
SPEND_LIMIT_ERROR_CODES = frozenset(
    {"enforced_spend_limit_reached", "contract_spend_limit_reached", "linked_organization_spend_limit_reached"}
)
# Two threads importing an SDK at the same moment can leave it half-initialized for good: every
# lazy import of the providers' SDKs (here and in the provider registry) holds this lock.
SDK_IMPORT_LOCK = threading.RLock()


@dataclass(frozen=True)
class SdkErrors:
    """What the providers' SDKs raise: an HTTP answer that is an error, no answer at all, and either."""

    status: tuple[type[Exception], ...]
    connection: tuple[type[Exception], ...]
    api: tuple[type[Exception], ...]
    openai_status: type[Exception]


@functools.cache
def sdk_errors() -> SdkErrors:
    """Imported on first use, not with this module: the two SDKs cost about 2 s of CPU to import, which
    every process that never calls a judge (beat, an embedded run without a key, a metrics worker)
    would pay for nothing. By the time a call has failed, its provider has imported them."""
    with SDK_IMPORT_LOCK:
        import anthropic
        import openai
    return SdkErrors(
        status=(anthropic.APIStatusError, openai.APIStatusError),
        connection=(anthropic.APIConnectionError, openai.APIConnectionError),
        api=(anthropic.APIError, openai.APIError),
        openai_status=openai.APIStatusError,
    )

# OpenAI's error code for a 429 that means "out of credit" (not "too fast").
OPENAI_QUOTA_CODES = frozenset({"insufficient_quota"})
# 408 and 409 are retried by the SDK's own policy too; every other 4xx is the request's fault.
_TRANSIENT_4XX = frozenset({408, 409, 429})
# Error types that may arrive on an HTTP 200 (an ``error`` event in the middle of a stream).
_TRANSIENT_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


def is_spend_limit(exc: BaseException) -> bool:
    """A 429 saying the organisation's spend limit is reached (by error code, or by message from proxies)."""
    errors = sdk_errors()
    if not isinstance(exc, errors.status) or exc.status_code != 429:
        return False
    if isinstance(exc, errors.openai_status):
        return exc.code in OPENAI_QUOTA_CODES
    if exc.error_code in SPEND_LIMIT_ERROR_CODES:
        return True
    return "spend limit" in (exc.api_message or exc.message or "").lower()


def is_transient(exc: BaseException) -> bool:
    """True when the same request may well succeed if sent again a little later.

    Transient: 429 (except a spend-limit 429), 408, 409, every 5xx including 529 overloaded,
    connection errors and timeouts. Not transient: 400, 401, 403, 404, 413, other 4xx, a spend-limit
    429, and anything that is not an API error (our own bugs must surface, not be retried).
    """
    errors = sdk_errors()
    if isinstance(exc, errors.connection):  # APITimeoutError is a subclass
        return True
    if not isinstance(exc, errors.status):
        return False
    status = exc.status_code
    if status >= 500:
        return True
    if status >= 400:
        return status in _TRANSIENT_4XX and not is_spend_limit(exc)
    # A stream that started with 200 and then sent an ``error`` event.
    return exc.type in _TRANSIENT_ERROR_TYPES


def is_rate_limited(exc: BaseException) -> bool:
    """A 429 (or a streamed ``rate_limit_error``) asking us to slow down: backpressure, which the rate
    governor answers by holding the fleet back; never counted as an outage by the circuit breaker. A
    spend-limit 429 is not one (it is not transient at all)."""
    if not isinstance(exc, sdk_errors().status) or is_spend_limit(exc):
        return False
    return exc.status_code == 429 or (exc.status_code < 400 and exc.type == "rate_limit_error")


def is_outage(exc: BaseException) -> bool:
    """A failure that counts toward the circuit breaker: transient, and not a rate limit (5xx, 529,
    408, 409, timeouts, connection errors)."""
    return is_transient(exc) and not is_rate_limited(exc)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait the provider asked for: ``retry-after-ms``, else ``retry-after`` (seconds or HTTP date)."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())


def exception_retry_after(exc: BaseException | None) -> float | None:
    if isinstance(exc, sdk_errors().status):
        return retry_after_seconds(exc.response.headers)
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one judge call. Defaults are the alert-session scoring design's: 3 retries after 1 s, 2 s, 4 s, plus jitter."""

    max_retries: int = 3
    backoff_base_seconds: float = 1.0
    # Up to this fraction of each backoff step is added at random so workers hit by the same outage
    # don't come back in lockstep.
    jitter_ratio: float = 0.5
    # A wait longer than this (a long ``retry-after``, a rate-governor window) is not waited out
    # while the component holds its lease: the judgment is deferred and re-queued instead.
    max_inline_wait_seconds: float = 30.0

    def backoff(self, retry_number: int) -> float:
        """The wait before retry ``retry_number`` (1-based), jitter included."""
        step = self.backoff_base_seconds * 2 ** (retry_number - 1)
        return step + random.uniform(0, step * self.jitter_ratio)


class wait_retry_after(tenacity.wait.wait_base):
    """Wait what the provider's ``retry-after`` says when it says something, else the policy's backoff."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        asked = exception_retry_after(exc)
        if asked is not None:
            return asked
        return self.policy.backoff(retry_state.attempt_number)


class stop_if_wait_exceeds(tenacity.stop.stop_base):
    """Stop when the next wait is longer than a worker should block; the caller defers the item instead."""

    def __init__(self, limit: float) -> None:
        self.limit = limit

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return retry_state.upcoming_sleep > self.limit


def retrying(
    policy: RetryPolicy, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> tenacity.AsyncRetrying:
    """A tenacity controller for one judge call (``async for``, on the judge loop). The last exception
    is re-raised when it gives up."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(is_transient),
        wait=wait_retry_after(policy),
        stop=tenacity.stop_after_attempt(policy.max_retries + 1) | stop_if_wait_exceeds(policy.max_inline_wait_seconds),
        sleep=sleep,
        reraise=True,
    )
