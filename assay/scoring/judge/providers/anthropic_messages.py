"""The Anthropic Messages API, through the ``anthropic`` SDK: structured outputs, the cached system prefix."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import anthropic
import pydantic

from assay.scoring.judge.inflight import InFlight
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.providers.base import (
    Answer,
    BatchLimits,
    BatchResult,
    BatchState,
    Call,
    Stop,
    describe_sdk_error,
)
from assay.scoring.pricing import USAGE_FIELDS

_STOPS: dict[str | None, Stop] = {"max_tokens": "max_tokens", "refusal": "refusal"}
# Message Batches: at most 100,000 requests and 256 MB per batch.
BATCH_LIMITS = BatchLimits(max_requests=100_000, max_bytes=256 * 1024**2)


def make_client(api_key: str, base_url: str | None, timeout: float) -> anthropic.AsyncAnthropic:
    """The realtime lane's SDK client, used on the judge loop (``judge/loop.py``). It sends through
    aiohttp (the SDK's ``DefaultAioHttpClient``; its session is made on the loop, at the first call),
    which spends about a third less CPU per call than httpx's connection pool with many calls in
    flight. It never retries on its own: ``retry.py`` owns retries, so they don't multiply."""
    client = anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
        http_client=anthropic.DefaultAioHttpClient(timeout=timeout),
    )
    return judge_loop().own(client)


def make_batch_client(api_key: str, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    """The batch lane's SDK client: a few calls per beat tick, made from the tick's own thread."""
    return anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)


@functools.lru_cache(maxsize=64)
def output_config_for(verdict_model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The structured-output request: the verdict schema made strict the way ``messages.parse`` does it.

    Cached per verdict model (a model's schema never changes in a process); callers must not mutate it."""
    return {"format": {"type": "json_schema", "schema": anthropic.transform_schema(verdict_model)}}


def usage_of(usage: Any) -> dict[str, int]:
    return {name: getattr(usage, name, None) or 0 for name in USAGE_FIELDS}


def answer_of(message: Any, headers: Any = None, raw: Any = None) -> Answer:
    """A Message (realtime or a batch result) as an ``Answer``."""
    text = "".join(block.text for block in message.content if block.type == "text")
    return Answer(text, _STOPS.get(message.stop_reason, "end"), usage_of(message.usage), headers or {}, raw)


def params_of(call: Call) -> dict[str, Any]:
    """The Messages request of ``call``, realtime or in a batch. Anthropic's API version takes no
    sampling parameters (suites are refused them at validation)."""
    params: dict[str, Any] = {
        "model": call.model,
        "max_tokens": call.max_tokens,
        "messages": call.messages,
        "output_config": output_config_for(call.verdict_model),
    }
    system = call.prompt.system_blocks()
    if system:
        params["system"] = system
    return params


class AnthropicProvider:
    """The fleet has one Anthropic endpoint (``ANTHROPIC_BASE_URL``), so a model's route is its name:
    the breaker and governor keys (and metric labels) Assay has always used for Anthropic models."""

    def __init__(self, name: str, client: anthropic.AsyncAnthropic, in_flight: InFlight | None = None) -> None:
        self.name = name
        self.client = client
        self.in_flight = in_flight

    def route(self, model: str) -> str:
        return model

    def admission_tokens(self, prompt_tokens: int, max_tokens: int) -> int:
        return prompt_tokens  # Anthropic limits input tokens and output tokens apart

    async def send(self, call: Call) -> Answer:
        raw = await self.client.messages.with_raw_response.create(**params_of(call), timeout=call.timeout)
        return answer_of(await raw.parse(), raw.headers, raw)

    def describe_error(self, exc: BaseException) -> str:
        return describe_sdk_error(self.name, exc)

    async def close(self) -> None:
        await self.client.close()


class AnthropicBatches:
    """The Message Batches API (``base.BatchAPI``): requests go inline, results come as JSON Lines."""

    limits = BATCH_LIMITS

    def __init__(self, name: str, client: anthropic.Anthropic) -> None:
        self.name = name
        self.client = client

    def line(self, custom_id: str, call: Call) -> dict[str, Any]:
        return {"custom_id": custom_id, "params": params_of(call)}

    def submit(self, lines: list[dict[str, Any]]) -> str:
        return self.client.messages.batches.create(requests=lines).id  # type: ignore[arg-type]

    def poll(self, provider_id: str) -> BatchState:
        remote = self.client.messages.batches.retrieve(provider_id)
        status = remote.processing_status
        return BatchState(status == "ended", status, remote.request_counts.model_dump())

    def collect(self, provider_id: str) -> Iterator[BatchResult]:
        for result in self.client.messages.batches.results(provider_id):
            outcome = result.result
            if outcome.type == "succeeded":
                yield BatchResult(result.custom_id, answer_of(outcome.message))
                continue
            why = getattr(getattr(getattr(outcome, "error", None), "error", None), "message", None)
            yield BatchResult(result.custom_id, None, f"request {outcome.type}{f' ({why})' if why else ''}")

    def discard(self, provider_id: str) -> None:
        """Nothing to delete: the requests went inline (no file), and Anthropic drops a batch's results
        itself 29 days after it was created."""
