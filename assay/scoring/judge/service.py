"""The judge: one item's verdict from a judge model, through the circuit breaker, the rate governor,
the provider's cap on calls in flight and retries. The model is reached through its provider
(``judge/providers``: Anthropic, or any OpenAI-compatible API); everything here is the same for all.

``run_judge`` returns a ``JudgeOutcome`` with a validated verdict or the reason there is none, and
raises nothing but ``JudgeDeferred`` (the provider cannot take the call now: re-queue the item later
without burning its attempts). A bad answer gets one repair call; it is never clamped or invented.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
import redis

from assay import observability
from assay.scoring.judge.breaker import Breaker, BreakerOpen
from assay.scoring.judge.governor import MIN_WAIT_SECONDS, Governor, estimate_tokens
from assay.scoring.judge.inflight import LEASE_MARGIN_SECONDS
from assay.scoring.judge.prompt import JudgePrompt, PromptError, render_prompt
from assay.scoring.judge.providers.base import Answer, Call, Provider
from assay.scoring.judge.retry import (
    RetryPolicy,
    exception_retry_after,
    is_outage,
    is_rate_limited,
    is_transient,
    retrying,
    sdk_errors,
)
from assay.scoring.pricing import USAGE_FIELDS, cost_usd
from assay.scoring.suites.providers import completion_limit
from assay.scoring.suites.catalog import ModelPrice

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeRequest:
    model: str
    max_tokens: int
    timeout_seconds: float
    prompt_template: str
    inputs: dict[str, str]
    verdict_model: type[pydantic.BaseModel]
    parameters: Mapping[str, Any] = field(default_factory=dict)  # temperature, seed, reasoning_effort, as set


@dataclass(frozen=True)
class JudgeOutcome:
    verdict: pydantic.BaseModel | None  # set on success
    failure: str | None  # set when the answer is unusable or the call failed for good
    raw_output: str | None  # the last raw answer text, kept on failure
    usage: dict[str, int]  # USAGE_FIELDS summed over every call of this judgment, the repair included
    cost_usd: float
    calls: int  # requests sent to the provider, failed attempts and the repair included
    repaired: bool = False  # the first answer was unusable and a repair was asked for

    def __post_init__(self) -> None:
        if (self.verdict is None) == (self.failure is None):
            raise ValueError("a judge outcome has either a verdict or a failure")


class JudgeDeferred(Exception):
    """The provider cannot take this call now (breaker open, rate limit, outage): retry in ``retry_in`` s.

    ``usage`` and ``cost_usd`` are what this attempt already spent (a first answer before the repair
    call was deferred, say), so the spend can still be recorded.
    """

    def __init__(
        self, retry_in: float, reason: str, *, usage: dict[str, int] | None = None, cost_usd: float = 0.0
    ) -> None:
        super().__init__(f"{reason}; retry in {retry_in:.1f}s")
        self.retry_in = retry_in
        self.reason = reason
        self.usage = usage or dict.fromkeys(USAGE_FIELDS, 0)
        self.cost_usd = cost_usd

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable as itself: Celery keeps a retry's reason, and wraps what it cannot pickle.
        return (type(self), (self.retry_in, self.reason), {"usage": self.usage, "cost_usd": self.cost_usd})


async def run_judge(
    request: JudgeRequest,
    *,
    provider: Provider,
    breaker: Breaker,
    governor: Governor,
    price: ModelPrice,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> JudgeOutcome:
    """Judge one item, on the judge loop. Raises only ``JudgeDeferred``; every other problem is
    ``outcome.failure``. The breaker and the governor are asked synchronously, on the loop: a
    ``GroupGate`` asks their store once per group, and one round trip is shorter than the calls'."""
    try:
        prompt = render_prompt(
            request.prompt_template,
            request.inputs,
            request.verdict_model,
            model=request.model,
            min_cacheable_tokens=price.min_cacheable_tokens,
        )
    except PromptError as exc:
        return JudgeOutcome(None, f"judge prompt: {exc.message}", None, dict.fromkeys(USAGE_FIELDS, 0), 0.0, 0)
    return await _Judgment(request, prompt, provider, breaker, governor, price, policy, sleep).run()


# How soon a judgment deferred for an unreachable breaker/governor store is tried again.
COORDINATION_RETRY_SECONDS = 5.0


def _bookkeep(record: Callable[..., None], *args: Any) -> None:
    """Breaker and governor bookkeeping after a call is best-effort: an answer already paid for must
    never be thrown away because Redis blinked while we were noting it."""
    try:
        record(*args)
    except redis.RedisError as exc:
        log.warning("could not record %s for the judge's breaker/governor: %s", record.__name__, exc)


class _CallFailed(Exception):
    """A call that another attempt cannot fix (400, 401, spend limit, ...)."""


@dataclass
class _Judgment:
    """One judgment in flight: its calls, and the tokens they used."""

    request: JudgeRequest
    prompt: JudgePrompt
    provider: Provider
    breaker: Breaker
    governor: Governor
    price: ModelPrice
    policy: RetryPolicy
    sleep: Callable[[float], Awaitable[None]]
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_FIELDS, 0))
    calls: int = 0
    last_answer: str | None = None
    repaired: bool = False
    route: str = field(init=False)  # the breaker's and governor's key: provider, endpoint and model

    def __post_init__(self) -> None:
        self.route = self.provider.route(self.request.model)

    async def run(self) -> JudgeOutcome:
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.prompt.user}]
        try:
            text, verdict, problem = self._read(await self._send(messages))
            if verdict is not None:
                return self._outcome(verdict=verdict)
            log.info("judge %s gave an unusable answer (%s); asking once for a repair", self.route, problem)
            observability.judge_repair(self.route)
            self.repaired = True
            messages += _repair_turns(text, problem)
            text, verdict, problem = self._read(await self._send(messages))
            if verdict is not None:
                return self._outcome(verdict=verdict)
            log.warning("judge %s answer still unusable after the repair: %s", self.route, problem)
            return self._outcome(failure=f"unusable answer after one repair attempt: {problem}", raw_output=text)
        except _CallFailed as exc:
            log.warning("judge call to %s failed for good: %s", self.route, exc)
            # A repair call that failed keeps the bad first answer for whoever looks at the score.
            return self._outcome(failure=str(exc), raw_output=self.last_answer)

    def _outcome(
        self, *, verdict: pydantic.BaseModel | None = None, failure: str | None = None, raw_output: str | None = None
    ) -> JudgeOutcome:
        spent = cost_usd(self.usage, self.price)
        observability.judgment(self.route, "verdict" if verdict is not None else "failed")
        return JudgeOutcome(verdict, failure, raw_output, dict(self.usage), spent, self.calls, self.repaired)

    def _deferred(self, retry_in: float, reason: str) -> JudgeDeferred:
        observability.judgment(self.route, "deferred")
        return JudgeDeferred(retry_in, reason, usage=dict(self.usage), cost_usd=cost_usd(self.usage, self.price))

    async def _send(self, messages: list[dict[str, Any]]) -> Answer:
        prompt_tokens = estimate_tokens(self.prompt.system + "".join(m["content"] for m in messages))
        # A reasoning model's reasoning counts against the token limit too: admitted at its whole room.
        limit = completion_limit(self.request.max_tokens, self.request.parameters)
        tokens = self.provider.admission_tokens(prompt_tokens, limit)
        controller = retrying(self.policy, sleep=self.sleep)
        try:
            async for attempt in controller:
                observability.judge_attempt(self.route, attempt.retry_state.attempt_number)
                with attempt:
                    answer = await self._attempt(messages, tokens)
        except BreakerOpen as exc:
            observability.breaker_rejected(self.route)
            raise self._deferred(exc.retry_in, str(exc)) from exc
        except redis.RedisError as exc:
            # No permission from the breaker and governor, no call: wait for their store to come back.
            raise self._deferred(COORDINATION_RETRY_SECONDS, f"breaker/governor store unavailable: {exc}") from exc
        except sdk_errors().api as exc:
            described = self.provider.describe_error(exc)
            if not is_transient(exc):
                raise _CallFailed(described) from exc
            # Out of retries (or asked to wait longer than a worker should block): the provider's
            # trouble, not the item's, so the item is re-queued rather than failed.
            attempts = controller.statistics.get("attempt_number", 1)
            retry_in = exception_retry_after(exc) or self.policy.backoff(self.policy.max_retries + 1)
            raise self._deferred(retry_in, f"{described} (after {attempts} attempt(s))") from exc
        return answer

    async def _attempt(self, messages: list[dict[str, Any]], tokens: int) -> Answer:
        model = self.route
        success_is_news = self.breaker.before_call(model)
        await self._wait_for_governor(tokens)
        lease = await self._take_in_flight_slot()
        self.calls += 1
        call = Call(
            self.request.model,
            self.prompt,
            messages,
            self.request.max_tokens,
            self.request.timeout_seconds,
            self.request.verdict_model,
            self.request.parameters,
        )
        try:
            answer = await self.provider.send(call)
        except sdk_errors().status as exc:
            if is_rate_limited(exc):
                # Backpressure, not an outage: the whole fleet holds its calls to this model for as
                # long as the provider asked (the retry waits that long too). First, before any other
                # bookkeeping: every round trip before it is a moment the fleet keeps sending.
                hold = exception_retry_after(exc) or self.policy.backoff(1)
                _bookkeep(self.governor.hold, model, hold)
            observability.judge_call(model, exc)
            _bookkeep(self.governor.observe_headers, model, exc.response.headers)
            if is_outage(exc):
                _bookkeep(self.breaker.record_failure, model)
            elif success_is_news:
                # The provider is up and answering; a 4xx (a 429 included) is this request's problem or
                # backpressure. Counting it as a success also releases a half-open probe slot instead
                # of leaving it to expire.
                _bookkeep(self.breaker.record_success, model)
            raise
        except sdk_errors().connection as exc:
            observability.judge_call(model, exc)
            _bookkeep(self.breaker.record_failure, model)
            raise
        finally:
            if lease is not None:
                _bookkeep(self._give_in_flight_slot, lease)
        _bookkeep(self.governor.observe_headers, model, answer.headers)
        _bookkeep(self.governor.charge, model, answer.usage.get("output_tokens", 0))
        if success_is_news:
            _bookkeep(self.breaker.record_success, model)
        observability.judge_call(model, answer.raw)
        for name, tokens in answer.usage.items():
            self.usage[name] = self.usage.get(name, 0) + tokens
        observability.judge_usage(model, answer.usage, self.price)
        return answer

    async def _wait_for_governor(self, tokens: int) -> None:
        waited = 0.0
        while (wait := self.governor.acquire(self.route, tokens)) > 0:
            if waited + wait > self.policy.max_inline_wait_seconds:
                raise self._deferred(wait, f"rate governor: {self.route} is at its rate limit")
            observability.governor_wait(self.route, wait)
            await self.sleep(wait)
            waited += wait

    async def _take_in_flight_slot(self) -> str | None:
        """A lease on one of the provider's fleet-wide call slots (``max_in_flight``), waited for up to
        the policy's inline wait; past it the judgment is deferred, spending no attempt."""
        in_flight = self.provider.in_flight
        if in_flight is None:
            return None
        waited = 0.0
        ttl = self.request.timeout_seconds + LEASE_MARGIN_SECONDS
        while (lease := in_flight.take(ttl)) is None:
            if waited + MIN_WAIT_SECONDS > self.policy.max_inline_wait_seconds:
                raise self._deferred(
                    MIN_WAIT_SECONDS * 20, f"{self.provider.name} has {in_flight.limit} call(s) in flight (max_in_flight)"
                )
            observability.governor_wait(self.route, MIN_WAIT_SECONDS)
            await self.sleep(MIN_WAIT_SECONDS)
            waited += MIN_WAIT_SECONDS
        return lease

    def _give_in_flight_slot(self, lease: str) -> None:
        assert self.provider.in_flight is not None
        self.provider.in_flight.give(lease)

    def _read(self, answer: Answer) -> tuple[str, pydantic.BaseModel | None, str | None]:
        text, verdict, problem = read_answer(
            answer, self.request.verdict_model, self.request.max_tokens, self.request.parameters
        )
        self.last_answer = text
        return text, verdict, problem


def read_answer(
    answer: Answer,
    verdict_model: type[pydantic.BaseModel],
    max_tokens: int,
    parameters: Mapping[str, Any] | None = None,
) -> tuple[str, pydantic.BaseModel | None, str | None]:
    """The answer's text and either its validated verdict or what is wrong with it (both lanes)."""
    text = answer.text
    if answer.stop == "max_tokens":
        room = (parameters or {}).get("max_completion_tokens")
        limit = f"max_completion_tokens={room}" if room else f"max_tokens={max_tokens}"
        if not text.strip():
            return text, None, f"the answer was cut off at {limit} before any text (reasoning used it up)"
        return text, None, f"the answer was cut off at {limit}"
    if answer.stop == "refusal":
        return text, None, "the model refused to answer"
    try:
        json.loads(text)
    except ValueError as exc:
        return text, None, f"the answer is not JSON ({exc})"
    try:
        # Strict: no type coercion, no fields the schema does not name, bounds enforced, never clamped.
        verdict = verdict_model.model_validate_json(text, strict=True, extra="forbid")
    except pydantic.ValidationError as exc:
        return text, None, f"the answer does not match the verdict schema: {_validation_summary(exc)}"
    return text, verdict, None


def _repair_turns(bad_answer: str, problem: str | None) -> list[dict[str, Any]]:
    note = (
        f"Your previous answer could not be used: {problem}. Answer again with only the JSON object the "
        "schema asks for: every required field, every value within its stated range, no other fields, "
        "nothing before or after it."
    )
    # The API rejects an empty assistant turn; consecutive user turns are merged, so the note alone works.
    turns = [{"role": "assistant", "content": bad_answer}] if bad_answer.strip() else []
    return [*turns, {"role": "user", "content": note}]


def _validation_summary(exc: pydantic.ValidationError, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"]) or "answer"
        got = repr(err.get("input"))
        parts.append(f"{where}: {err['msg']} (got {got[:80]})")
    if exc.error_count() > limit:
        parts.append(f"and {exc.error_count() - limit} more")
    return "; ".join(parts)
