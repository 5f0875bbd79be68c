"""A loopback fake of the OpenAI Chat Completions API, for tests, driven through the real ``openai`` SDK.

It shares the Anthropic fake's answers and control plane (``assay/dev/anthropic_server.py``): answers
follow the verdict schema and are a deterministic function of the first user message (its sha256 is the
call's *item key*; a conversation with an assistant turn is a repair), the same ``/_fake/script``,
``/_fake/config``, ``/_fake/calls`` and ``/_fake/reset``, driven by ``FakeControl``. What is OpenAI's:

- ``POST /v1/chat/completions`` (non-streaming). The schema comes from ``response_format`` (strict
  ``json_schema``), or, for ``json_object`` and plain-text servers, from the JSON schema written at the
  end of the system message (as ``judge/providers/openai_chat.py`` writes it). ``json_object`` without
  the word JSON in the messages is a 400, as on the real API.
- Reasoning models (names starting ``gpt-5`` or ``o``) refuse ``temperature`` and ``max_tokens`` (400);
  their answers report ``completion_tokens_details.reasoning_tokens`` (``FakeOpenAIConfig.reasoning_tokens``),
  counted inside ``completion_tokens`` as OpenAI counts them.
- Usage: ``prompt_tokens`` with ``prompt_tokens_details.cached_tokens`` once a system prefix of at least
  1,024 tokens was seen before for the model (OpenAI's automatic prompt caching).
- ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` on every answer (resets as Go durations,
  ``"1s"``, ``"6m0s"``, ``"20ms"``), from token buckets for requests and tokens (prompt plus max_tokens,
  as OpenAI counts them; ``assay/dev/ratelimit.py``), enforced with 429 ``rate_limit_exceeded`` and a
  ``retry-after`` when ``enforce_limits`` is set, as the Anthropic fake's; errors are OpenAI's: 429 ``rate_limit_exceeded`` (``retry-after``
  when scripted), 429 ``insufficient_quota`` (kind ``spend_limit``), 500, 503 (kind ``overloaded``), 401, 400.
- ``finish_reason: length``: kind ``truncated`` cuts the answer in half; kind ``reasoning_cutoff``
  answers nothing at all (a reasoning model that spent max_completion_tokens thinking).
- The Batch API (``/v1/files``, ``/v1/batches``), scripted with ``/_fake/batch_outcomes``: see
  ``assay/dev/openai_batches.py``.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Literal

from pydantic import ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from assay.dev.anthropic_server import (
    _ERRORS,
    _SERVER_OPTIONS,
    CHARS_PER_TOKEN,
    Behaviour,
    FakeConfig,
    FakeState,
    ServedFake,
    _answer,
    _item_key,
    _tokens,
    reconfigure,
    script_batch_outcomes,
    script_behaviours,
)
from assay.dev.fake_answers import wait_as_drawn
from assay.dev.loopback import SERVER_DEFAULTS
from assay.dev.openai_batches import BatchAPI
from assay.dev.ratelimit import (
    Costs,
    ProviderLimits,
    add_limit_options,
    limit_options,
    openai_headers,
    retry_after,
)

MIN_CACHED_PREFIX_TOKENS = 1024
# OpenAI's codes for the errors the Anthropic fake's kinds stand for.
_CODES = {
    "rate_limit": (429, "requests", "rate_limit_exceeded"),
    "spend_limit": (429, "insufficient_quota", "insufficient_quota"),
    "overloaded": (503, "server_error", None),
    "server_error": (500, "server_error", None),
    "unauthorized": (401, "invalid_request_error", "invalid_api_key"),
    "bad_request": (400, "invalid_request_error", None),
}
_SCHEMA_MARKER = "JSON schema"


class OpenAIBehaviour(Behaviour):
    """The Anthropic fake's behaviours, and ``reasoning_cutoff``: finish_reason length with no text."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal[  # type: ignore[assignment]
        "ok", "malformed", "truncated", "out_of_range", "hang", "rate_limit", "spend_limit", "overloaded",
        "server_error", "unauthorized", "bad_request", "error", "reasoning_cutoff",
    ] = "ok"


class FakeOpenAIConfig(FakeConfig):
    reasoning_tokens: int = Field(0, ge=0, description="Reasoning tokens a reasoning model reports per answer.")
    tokens_limit: int = Field(
        2_000_000, ge=1, description="Tokens a minute (x-ratelimit-*-tokens): prompt plus max_tokens, as OpenAI counts."
    )


def is_reasoning_model(model: str) -> bool:
    return model.startswith(("gpt-5", "o1", "o3", "o4"))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema")
    system = next((_text(m.get("content")) for m in body["messages"] if m.get("role") == "system"), "")
    at = system.rfind(_SCHEMA_MARKER)
    start = system.find("{", at) if at >= 0 else -1
    if start < 0:
        return None
    try:
        return json.loads(system[start:])
    except ValueError:
        return None


def _invalid(body: Any) -> str | None:
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body.get("model"):
        return "model and messages are required"
    model = body["model"]
    if is_reasoning_model(model):
        for name in ("temperature", "max_tokens"):
            if name in body:
                return f"Unsupported parameter: '{name}' is not supported with this model."
    if (body.get("response_format") or {}).get("type") == "json_object":
        if not any("json" in _text(m.get("content")).lower() for m in body["messages"]):
            return "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
    return None


class _OpenAIState(FakeState):
    def new_limits(self) -> ProviderLimits:
        cfg = self.config
        return ProviderLimits({"requests": cfg.requests_limit, "tokens": cfg.tokens_limit}, cfg.burst_seconds)

    def ratelimit_headers(self, now: float) -> dict[str, str]:
        return openai_headers(self.limits, now)

    def completion(self, body: dict[str, Any], item_key: str, kind: str) -> dict[str, Any]:
        messages = [m for m in body["messages"] if m.get("role") != "system"]
        system = "".join(_text(m.get("content")) for m in body["messages"] if m.get("role") == "system")
        prompt_tokens = max(1, _tokens(system + "".join(_text(m.get("content")) for m in messages)))
        cached = 0
        if _tokens(system) >= MIN_CACHED_PREFIX_TOKENS:
            key = hashlib.sha256(f"{body['model']}\0{system}".encode()).hexdigest()
            if key in self.cached_prefixes:
                cached = _tokens(system)
            self.cached_prefixes.add(key)
        if not any(m.get("role") == "assistant" for m in messages):
            self.answers_per_key[item_key] += 1
        repeat = max(0, self.answers_per_key[item_key] - 1)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 4096)
        # The shared answer code reads the schema where Anthropic requests carry it.
        schema = _schema_of(body)
        shaped = {"model": body["model"], "max_tokens": max_tokens, "output_config": {"format": {"type": "json_schema", "schema": schema}} if schema else {}}
        reasoning = self.config.reasoning_tokens if is_reasoning_model(body["model"]) else 0
        if kind == "reasoning_cutoff":
            text, finish, output_tokens, reasoning = "", "length", 0, max_tokens
        else:
            text, stop, output_tokens = _answer(shaped, messages, item_key, kind, self.config, repeat)
            finish = "length" if stop == "max_tokens" else "stop"
        return {
            "id": f"chatcmpl-fake{self.sequence:08d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": output_tokens + reasoning,
                "total_tokens": prompt_tokens + output_tokens + reasoning,
                "prompt_tokens_details": {"cached_tokens": cached},
                "completion_tokens_details": {"reasoning_tokens": reasoning},
            },
        }


def _error(status: int, error_type: str, code: str | None, message: str, headers: dict[str, str]) -> JSONResponse:
    error = {"message": message, "type": error_type, "param": None, "code": code}
    return JSONResponse({"error": error}, status, headers)


def create_app(config: FakeOpenAIConfig | None = None) -> Starlette:
    state = _OpenAIState(config or FakeOpenAIConfig())
    batches = BatchAPI(state, _invalid)

    async def completions(request: Request) -> Response:
        now = time.time()
        state.sequence += 1
        headers = {"x-request-id": f"req_fake_{state.sequence:08d}"}
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid_request_error", None, "We could not parse the JSON body.", headers)
        if not request.headers.get("authorization"):
            return _error(401, "invalid_request_error", "invalid_api_key", "You didn't provide an API key.", headers)
        problem = _invalid(body)
        if problem:
            return _error(400, "invalid_request_error", None, problem, headers)

        item_key = _item_key(body["messages"])
        prompt_tokens = len("".join(_text(m.get("content")) for m in body["messages"])) // CHARS_PER_TOKEN
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        wait = state.admit(Costs(1, prompt_tokens, max_tokens), now)
        if wait:
            # Refused by the buckets: recorded as a call answered 429, before any behaviour is drawn.
            repair = any(m.get("role") == "assistant" for m in body["messages"])
            state.record_call(body, item_key, "rate_limit", now, status=429, repair=repair, limit_tokens=prompt_tokens + max_tokens)
            headers.update(state.ratelimit_headers(now))
            headers["retry-after"] = retry_after(wait)
            message = "Rate limit reached for requests or tokens per min. Please try again later."
            return _error(429, "requests", "rate_limit_exceeded", message, headers)
        behaviour = state.next_behaviour(body["model"])
        call = state.record_call(body, item_key, behaviour.kind, now, limit_tokens=prompt_tokens + max_tokens)
        call["repair"] = any(m.get("role") == "assistant" for m in body["messages"])
        call["request"] = {k: v for k, v in body.items() if k != "messages"}
        headers.update(state.ratelimit_headers(now))
        headers.update(behaviour.headers)

        gave_up = await wait_as_drawn(behaviour, state.config, request, call, headers)
        if gave_up is not None:
            return gave_up
        if behaviour.kind in _ERRORS or behaviour.kind == "error":
            status, error_type, code = _CODES.get(behaviour.kind, (behaviour.status or 500, "server_error", None))
            status = behaviour.status or status
            if behaviour.retry_after is not None:
                headers["retry-after"] = f"{behaviour.retry_after:g}"
            if behaviour.retry_after_ms is not None:
                headers["retry-after-ms"] = f"{behaviour.retry_after_ms:g}"
            call["status"] = status
            return _error(status, error_type, code, behaviour.message or f"scripted {behaviour.kind}", headers)
        return JSONResponse(state.completion(body, item_key, behaviour.kind), headers=headers)

    async def script(request: Request) -> Response:
        return script_behaviours(state, await request.json(), OpenAIBehaviour)

    async def configure(request: Request) -> Response:
        return reconfigure(state, await request.json(), FakeOpenAIConfig)

    async def calls(request: Request) -> Response:
        batches.settle_all()
        return JSONResponse(state.calls_report())

    async def reset(request: Request) -> Response:
        state.reset()
        batches.reset()
        return JSONResponse({"ok": True})

    async def script_batches(request: Request) -> Response:
        return script_batch_outcomes(state, await request.json())

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/_fake/script", script, methods=["POST"]),
            Route("/_fake/config", configure, methods=["POST"]),
            Route("/_fake/calls", calls, methods=["GET"]),
            Route("/_fake/reset", reset, methods=["POST"]),
            Route("/_fake/batch_outcomes", script_batches, methods=["POST"]),
            *batches.routes(),
        ]
    )


class FakeOpenAI(ServedFake):
    """The fake served by uvicorn in a background thread on 127.0.0.1; a context manager. Its SDK
    base URL is ``api_base`` (``.../v1``)."""

    def __init__(self, *, latency: float = 0.0, port: int = 0, **config: Any) -> None:
        super().__init__(create_app(FakeOpenAIConfig(latency=latency, **config)), "fake-openai", port)
        self.api_base = f"{self.base_url}/v1"


def main() -> None:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "localhost"], help="loopback only")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    add_limit_options(parser, FakeOpenAIConfig())
    args = parser.parse_args()
    app = create_app(FakeOpenAIConfig(latency=args.latency, **limit_options(args)))
    uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, **SERVER_DEFAULTS, **_SERVER_OPTIONS)).run()


if __name__ == "__main__":
    main()
