"""What every judge provider does, whatever its API: send one call, answer in one shape."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pydantic

from assay.scoring.judge.inflight import InFlight
from assay.scoring.judge.prompt import JudgePrompt

# How an answer ended: complete, cut at the answer-length limit, or refused by the model.
Stop = Literal["end", "max_tokens", "refusal"]


@dataclass(frozen=True)
class Call:
    """One request to a judge model: the prompt and the conversation so far (a repair adds turns)."""

    model: str
    prompt: JudgePrompt
    messages: list[dict[str, Any]]  # [{"role": "user" | "assistant", "content": str}, ...]
    max_tokens: int
    timeout: float
    verdict_model: type[pydantic.BaseModel]
    parameters: Mapping[str, Any] = field(default_factory=dict)  # temperature, seed, reasoning_effort


@dataclass(frozen=True)
class Answer:
    text: str
    stop: Stop
    # USAGE_FIELDS (assay.scoring.pricing): input_tokens excludes cache reads and writes, output_tokens
    # includes reasoning tokens (billed and rate-limited as output).
    usage: dict[str, int]
    headers: Mapping[str, str]
    raw: Any  # the SDK's raw HTTP response (its status and elapsed time feed the metrics)


class Provider(Protocol):
    name: str  # as models.yaml names it
    in_flight: InFlight | None  # the fleet-wide cap on calls in flight, when the provider has one

    def route(self, model: str) -> str:
        """The key of the breaker and the governor for ``model`` at this provider's endpoint."""

    def admission_tokens(self, prompt_tokens: int, max_tokens: int) -> int:
        """What one call costs against the provider's token limit (OpenAI counts max_tokens in)."""

    async def send(self, call: Call) -> Answer:
        """Send ``call`` once (no retries: ``retry.py`` owns them). Raises the SDK's errors."""

    def describe_error(self, exc: BaseException) -> str: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class BatchLimits:
    """What one provider batch may hold, as the provider's batch API caps it."""

    max_requests: int
    max_bytes: int  # the encoded request lines (``BatchAPI.line``) together


@dataclass(frozen=True)
class BatchState:
    """A provider batch as a poll saw it: ``ended`` once its results can be read (whether every
    request succeeded, some expired, or the batch failed as a whole)."""

    ended: bool
    status: str  # the provider's own word for it (in_progress, finalizing, expired, failed, ...)
    counts: dict[str, int]
    error: str | None = None  # why the batch failed as a whole (then it has no results)


@dataclass(frozen=True)
class BatchResult:
    """One request's result: an ``Answer``, or why there is none (errored, expired, canceled)."""

    custom_id: str
    answer: Answer | None
    problem: str | None = None


class BatchAPI(Protocol):
    """A provider's batch API, as the judge's batch lane uses it (``assay.scoring.rescoring.batch_lane``):
    the lane never names a provider. Synchronous: the lane runs on beat's clock, a few calls a tick."""

    name: str
    limits: BatchLimits

    def line(self, custom_id: str, call: Call) -> dict[str, Any]:
        """``call`` as one request of a provider batch (its JSON size counts toward ``limits.max_bytes``)."""

    def submit(self, lines: list[dict[str, Any]]) -> str:
        """Send the requests as one provider batch; returns the provider's id for it."""

    def poll(self, provider_id: str) -> BatchState: ...

    def collect(self, provider_id: str) -> Iterator[BatchResult]:
        """Every result of an ended provider batch, in any order (matched by ``custom_id``)."""

    def discard(self, provider_id: str) -> None:
        """Delete what the provider stores for an ended batch whose results have landed. Best-effort:
        never raises (what it could not delete is logged and stays with the provider)."""


def describe_sdk_error(provider: str, exc: BaseException) -> str:
    """A failed call in words, for both SDKs (they share the shape of their errors)."""
    status = getattr(exc, "status_code", None)
    if status is None:
        if "Timeout" in type(exc).__name__:
            return f"{provider} request timed out"
        return f"{provider} connection error: {getattr(exc, 'message', exc)}"
    kind = getattr(exc, "type", None) or getattr(exc, "code", None)
    body = getattr(exc, "body", None)
    message = (
        getattr(exc, "api_message", None)
        or (body.get("message") if isinstance(body, dict) else None)
        or getattr(exc, "message", None)
        or str(exc)
    )
    return f"{provider} {status}{f' {kind}' if kind else ''}: {message}"
