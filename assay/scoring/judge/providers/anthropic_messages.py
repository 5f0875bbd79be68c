"""The Anthropic Messages API, through the ``anthropic`` SDK: structured outputs, the cached system prefix."""

from __future__ import annotations

import functools
from typing import Any

import anthropic
import pydantic

from assay.scoring.judge.inflight import InFlight
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.providers.base import Answer, Call, Stop, describe_sdk_error
from assay.scoring.pricing import USAGE_FIELDS

_STOPS: dict[str | None, Stop] = {"max_tokens": "max_tokens", "refusal": "refusal"}


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
        system = call.prompt.system_blocks()
        raw = await self.client.messages.with_raw_response.create(
            model=call.model,
            max_tokens=call.max_tokens,
            system=system if system else anthropic.omit,
            messages=call.messages,  # type: ignore[arg-type]
            output_config=output_config_for(call.verdict_model),  # type: ignore[arg-type]
            timeout=call.timeout,
        )
        return answer_of(await raw.parse(), raw.headers, raw)

    def describe_error(self, exc: BaseException) -> str:
        return describe_sdk_error(self.name, exc)

    async def close(self) -> None:
        await self.client.close()
