"""What every judge provider does, whatever its API: send one call, answer in one shape."""

from __future__ import annotations

from collections.abc import Mapping
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
