"""OpenAI-compatible Chat Completions (the OpenAI API, vLLM, Ollama, ...), through the ``openai`` SDK.

Servers differ in how they can be held to a schema, so each provider declares it
(``structured_output``): ``json_schema`` sends the verdict schema as a strict ``response_format``;
``json_object`` asks for JSON and ``prompt`` for nothing, both with the schema written into the
system prompt. Either way the judge validates the answer against the verdict model and asks for one
repair. OpenAI caches a long prompt prefix by itself: the system prompt comes first so it is one.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import openai
import pydantic
from openai.lib._pydantic import to_strict_json_schema  # the SDK's own strict transform (pinned SDK)

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
from assay.scoring.suites.providers import ProviderConfig

log = logging.getLogger(__name__)

_STOPS: dict[str | None, Stop] = {"length": "max_tokens", "content_filter": "refusal"}
# The Batch API: at most 50,000 requests and 200 MB per input file, one model per file (the lane
# keeps one model per provider batch for every provider).
BATCH_LIMITS = BatchLimits(max_requests=50_000, max_bytes=200 * 1024**2)
BATCH_ENDPOINT = "/v1/chat/completions"
# A provider batch's end: results can be read (``failed``: validation refused the file, no results).
_ENDED = frozenset({"completed", "expired", "cancelled", "failed"})


def make_batch_client(api_key: str, base_url: str | None, timeout: float) -> openai.OpenAI:
    """The batch lane's SDK client: a few calls per beat tick, from the tick's own thread."""
    return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)


def make_client(api_key: str, base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
    """As for Anthropic: aiohttp on the judge loop, no retries of the SDK's own."""
    client = openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
        http_client=openai.DefaultAioHttpClient(timeout=timeout),
    )
    return judge_loop().own(client)


@functools.lru_cache(maxsize=64)
def response_format_for(verdict_model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The strict ``json_schema`` response format of a verdict model (cached; callers must not mutate it)."""
    schema = to_strict_json_schema(verdict_model)
    return {"type": "json_schema", "json_schema": {"name": verdict_model.__name__, "schema": schema, "strict": True}}


@functools.lru_cache(maxsize=64)
def schema_instruction(verdict_model: type[pydantic.BaseModel]) -> str:
    schema = json.dumps(verdict_model.model_json_schema(), indent=2, sort_keys=True)
    return (
        "Answer with only a JSON object that follows this JSON schema (every required field, every value "
        f"within its stated range, no other fields, nothing before or after it):\n{schema}"
    )


def usage_of(usage: Any) -> dict[str, int]:
    """OpenAI's usage in Assay's fields: cached prompt tokens are cache reads (OpenAI bills no cache
    write); completion tokens include the reasoning tokens, billed as output. How many of the output
    tokens were reasoning is kept beside them (``reasoning_tokens``) when the answer says."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    counted = {
        "input_tokens": max(0, (usage.prompt_tokens or 0) - cached),
        "output_tokens": usage.completion_tokens or 0,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    if reasoning:
        counted["reasoning_tokens"] = reasoning
    return counted


def answer_of(completion: Any, headers: Any = None, raw: Any = None) -> Answer:
    """A ChatCompletion (realtime or a batch result line) as an ``Answer``."""
    choice = completion.choices[0] if completion.choices else None
    message = choice.message if choice is not None else None
    text = (message.content or "") if message is not None else ""
    stop: Stop = _STOPS.get(choice.finish_reason if choice is not None else None, "end")
    if message is not None and getattr(message, "refusal", None):
        text, stop = message.refusal, "refusal"
    return Answer(text, stop, usage_of(completion.usage), headers or {}, raw)


def request_body(config: ProviderConfig, call: Call) -> dict[str, Any]:
    """The Chat Completions body of ``call`` (the realtime lane's request and a batch line's body alike)."""
    mode = config.structured_output
    system = call.prompt.system
    if mode != "json_schema":
        system = f"{system}\n\n{schema_instruction(call.verdict_model)}" if system else schema_instruction(call.verdict_model)
    messages = ([{"role": "system", "content": system}] if system else []) + list(call.messages)
    parameters = dict(call.parameters)
    # A reasoning model's max_completion_tokens (reasoning and answer together) replaces max_tokens.
    limit = parameters.pop("max_completion_tokens", None) or call.max_tokens
    body: dict[str, Any] = {"model": call.model, "messages": messages, config.max_tokens_parameter: limit, **parameters}
    if mode == "json_schema":
        body["response_format"] = response_format_for(call.verdict_model)
    elif mode == "json_object":
        body["response_format"] = {"type": "json_object"}
    return body


class OpenAIProvider:
    def __init__(
        self, name: str, config: ProviderConfig, client: openai.AsyncOpenAI, in_flight: InFlight | None = None
    ) -> None:
        self.name = name
        self.config = config
        self.client = client
        self.in_flight = in_flight
        # The endpoint the client really talks to (OPENAI_BASE_URL included), in every route key: two
        # servers behind one provider name over time never share a breaker.
        self.endpoint = urlsplit(str(client.base_url)).netloc

    def route(self, model: str) -> str:
        return f"{self.name}@{self.endpoint}:{model}"

    def admission_tokens(self, prompt_tokens: int, max_tokens: int) -> int:
        # OpenAI counts a request against its token limit by its prompt plus its max_tokens.
        return prompt_tokens + max_tokens

    async def send(self, call: Call) -> Answer:
        raw = await self.client.chat.completions.with_raw_response.create(**request_body(self.config, call), timeout=call.timeout)
        return answer_of(raw.parse(), raw.headers, raw)  # the openai SDK parses a raw response synchronously

    def describe_error(self, exc: BaseException) -> str:
        return describe_sdk_error(self.name, exc)

    async def close(self) -> None:
        await self.client.close()


class OpenAIBatches:
    """The Batch API (``base.BatchAPI``): the requests go up as a JSONL file (``/v1/files``, purpose
    ``batch``), a batch of it is created on ``/v1/chat/completions``, and its results come back as an
    output file (answers) and an error file (failed and expired requests). Once the results have
    landed, the three files are deleted (``discard``): OpenAI keeps them in the account's storage
    until then."""

    limits = BATCH_LIMITS

    def __init__(self, name: str, config: ProviderConfig, client: openai.OpenAI) -> None:
        self.name = name
        self.config = config
        self.client = client

    def line(self, custom_id: str, call: Call) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": BATCH_ENDPOINT, "body": request_body(self.config, call)}

    def submit(self, lines: list[dict[str, Any]]) -> str:
        data = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)
        uploaded = self.client.files.create(file=("assay-batch.jsonl", data, "application/jsonl"), purpose="batch")
        return self.client.batches.create(
            input_file_id=uploaded.id, endpoint=BATCH_ENDPOINT, completion_window="24h"
        ).id

    def poll(self, provider_id: str) -> BatchState:
        remote = self.client.batches.retrieve(provider_id)
        counts = remote.request_counts.model_dump() if remote.request_counts is not None else {}
        return BatchState(remote.status in _ENDED, remote.status, counts, _batch_errors(remote))

    def collect(self, provider_id: str) -> Iterator[BatchResult]:
        remote = self.client.batches.retrieve(provider_id)
        for file_id in (remote.output_file_id, remote.error_file_id):
            if not file_id:
                continue  # no request ended that way
            with self.client.files.with_streaming_response.content(file_id) as response:
                for text in response.iter_lines():
                    if text.strip():
                        yield _batch_result(json.loads(text))

    def discard(self, provider_id: str) -> None:
        try:
            remote = self.client.batches.retrieve(provider_id)
        except openai.APIError as exc:
            log.warning("provider batch %s: its files were not deleted: %s", provider_id, describe_sdk_error(self.name, exc))
            return
        for file_id in (remote.input_file_id, remote.output_file_id, remote.error_file_id):
            if not file_id:
                continue
            try:
                self.client.files.delete(file_id)
            except openai.NotFoundError:
                continue  # deleted already
            except openai.APIError as exc:
                log.warning(
                    "provider batch %s: file %s was not deleted and stays in the OpenAI account's storage: %s",
                    provider_id, file_id, describe_sdk_error(self.name, exc),
                )


def _batch_errors(remote: Any) -> str | None:
    """Why a provider batch failed as a whole (its file was refused), in words."""
    errors = getattr(getattr(remote, "errors", None), "data", None) or []
    if remote.status != "failed":
        return None
    described = [f"{e.code}: {e.message}" + (f" (line {e.line})" if e.line else "") for e in errors]
    return "; ".join(described) or "the provider batch failed"


def _batch_result(line: dict[str, Any]) -> BatchResult:
    """One line of an output or error file."""
    custom_id = str(line.get("custom_id"))
    error = line.get("error")
    if error:
        word = "expired" if error.get("code") == "batch_expired" else "errored"
        return BatchResult(custom_id, None, f"request {word} ({error.get('code')}: {error.get('message')})")
    response = line.get("response") or {}
    body = response.get("body") or {}
    if response.get("status_code") != 200:
        message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
        return BatchResult(custom_id, None, f"request errored ({response.get('status_code')}: {message})")
    return BatchResult(custom_id, answer_of(openai.types.chat.ChatCompletion.model_validate(body)))
