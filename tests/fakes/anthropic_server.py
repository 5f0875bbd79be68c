"""A loopback fake of the Anthropic Messages API, for tests and benchmarks, driven through the real SDK.

Run it in a background thread::

    with FakeAnthropic(latency=0.0) as fake:
        client = anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0)
        fake.script({"kind": "overloaded", "times": 5}, {"kind": "ok"})

or as its own process (for live workers and benchmarks), scripted over the same HTTP control plane
with ``FakeControl(base_url)``::

    python -m tests.fakes.anthropic_server --port 8765 --latency 0.05

API: ``POST /v1/messages`` (JSON or SSE stream), ``POST /v1/messages/count_tokens``.
Control plane: ``POST /_fake/script`` (``{"behaviours": [...]}`` appended to the queue, one per call),
``POST /_fake/config`` (partial ``FakeConfig``), ``GET /_fake/calls``, ``POST /_fake/reset``.

Answers follow the schema in ``output_config.format.schema`` and are a deterministic function of
the first user message, so repeated runs agree. Calls are counted per *item key*: the sha256 of the
first user message's text; a repair call (any conversation longer than one message) counts against
the same key and is flagged ``repair``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import re
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.loopback import SERVER_DEFAULTS, LoopbackServer

INJECTION_MARKER = "IGNORE PREVIOUS INSTRUCTIONS"
# API version 2026-10-21 (the one SDK 2.x sends) removed sampling parameters: the real API answers 400.
SAMPLING_PARAMETERS = frozenset({"temperature", "top_p", "top_k"})
LEGACY_API_VERSION = "2023-06-01"
CHARS_PER_TOKEN = 4
WINDOW_SECONDS = 60.0

BehaviourKind = Literal[
    "ok",  # a valid answer (plain text without a schema)
    "malformed",  # an answer that is not JSON
    "truncated",  # half an answer, stop_reason "max_tokens"
    "out_of_range",  # JSON that breaks the schema's bounds (or, without bounds, adds a field)
    "hang",  # hold the request for hang_seconds, past the client's timeout (then answer, if anyone listens)
    "rate_limit",  # 429 rate_limit_error
    "spend_limit",  # 429 whose error says the spend limit is reached
    "overloaded",  # 529 overloaded_error
    "server_error",  # 500 api_error
    "unauthorized",  # 401 authentication_error
    "bad_request",  # 400 invalid_request_error
    "error",  # any status: give ``status`` (and ``error_type``)
]

_ERRORS: dict[str, tuple[int, str, str]] = {
    "rate_limit": (429, "rate_limit_error", "This request would exceed your organization's rate limit."),
    "spend_limit": (
        429,
        "rate_limit_error",
        "Your organization has reached its spend limit. You will regain access when the limit is raised.",
    ),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "server_error": (500, "api_error", "Internal server error"),
    "unauthorized": (401, "authentication_error", "invalid x-api-key"),
    "bad_request": (400, "invalid_request_error", "messages: the request is not valid"),
}
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class Behaviour(BaseModel):
    """What the fake does for one call (``times`` consecutive calls)."""

    model_config = ConfigDict(extra="forbid")

    kind: BehaviourKind = "ok"
    times: int = Field(1, ge=1)
    latency: float | None = Field(None, ge=0, description="Seconds before answering; None = the configured default.")
    status: int | None = Field(None, ge=400, le=599, description="Error status for kind 'error' (or to override).")
    error_type: str | None = None
    message: str | None = None
    retry_after: float | None = Field(None, ge=0, description="Seconds, sent as the retry-after header.")
    retry_after_ms: float | None = Field(None, ge=0, description="Milliseconds, sent as retry-after-ms.")
    hang_seconds: float = Field(600.0, ge=0)
    headers: dict[str, str] = Field(default_factory=dict, description="Extra response headers.")


class FakeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    latency: float = Field(0.0, ge=0)
    default_kind: BehaviourKind = "ok"
    obey_injection: bool = Field(True, description=f"Answer invalid JSON to prompts containing {INJECTION_MARKER!r}.")
    requests_limit: int = Field(4000, ge=1, description="Reported in anthropic-ratelimit-requests-* headers.")
    input_tokens_limit: int = Field(2_000_000, ge=1, description="Reported in anthropic-ratelimit-input-tokens-*.")


# --- answers that follow a schema ----------------------------------------------------------------

_WORDS = (
    "query filter table join window aggregate evidence timeline signal alert pod process file log metric "
    "summary gap tool confidence scope result column threshold pattern session approach step"
).split()
_BOUND = re.compile(r"\b(minimum|maximum|exclusiveMinimum|exclusiveMaximum):\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


def _bounds(schema: dict[str, Any]) -> dict[str, float]:
    """Numeric bounds, whether kept as keywords or moved into the description by the SDK's strict
    transform (``{minimum: 0, maximum: 1}``), which a real model reads too."""
    found = {k: float(v) for k, v in _BOUND.findall(schema.get("description") or "")}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if isinstance(schema.get(key), int | float):
            found[key] = float(schema[key])
    return found


class _Generator:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.defs = root.get("$defs") or root.get("definitions") or {}
        self.rng = rng

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.defs[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def value(self, schema: dict[str, Any], depth: int = 0) -> Any:
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                variants = [v for v in schema[key] if self.resolve(v).get("type") != "null"] or schema[key]
                return self.value(self.rng.choice(variants), depth)
        if schema.get("allOf"):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(self.resolve(part))
            return self.value(merged, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            return {name: self.value(sub, depth + 1) for name, sub in (schema.get("properties") or {}).items()}
        if kind == "array":
            low = int(schema.get("minItems", 0))
            high = int(schema.get("maxItems", low + 2 if depth < 4 else low))
            items = schema.get("items") or {"type": "string"}
            return [self.value(items, depth + 1) for _ in range(self.rng.randint(low, max(low, high)))]
        if kind in ("integer", "number"):
            return self.number(schema, integer=kind == "integer")
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema)

    def number(self, schema: dict[str, Any], *, integer: bool) -> int | float:
        b = _bounds(schema)
        step = 1 if integer else 0.01
        low = b.get("minimum", b["exclusiveMinimum"] + step if "exclusiveMinimum" in b else None)
        high = b.get("maximum", b["exclusiveMaximum"] - step if "exclusiveMaximum" in b else None)
        if low is None:
            low = 0.0 if high is None or high >= 0 else high - 100
        if high is None:
            high = low + 100
        if integer:
            return self.rng.randint(math.ceil(low), math.floor(high))
        return min(high, max(low, round(self.rng.uniform(low, high), 2)))

    def string(self, schema: dict[str, Any]) -> str:
        fmt = schema.get("format")
        if fmt == "date-time":
            return datetime.fromtimestamp(1_700_000_000 + self.rng.randint(0, 10**7), UTC).isoformat()
        if fmt == "date":
            return datetime.fromtimestamp(1_700_000_000 + self.rng.randint(0, 10**7), UTC).date().isoformat()
        if fmt == "uuid":
            return "%08x-%04x-4%03x-8%03x-%012x" % tuple(self.rng.getrandbits(b) for b in (32, 16, 12, 12, 48))
        if fmt in ("email",):
            return f"{self.rng.choice(_WORDS)}@example.com"
        if fmt in ("uri",):
            return f"https://example.com/{self.rng.choice(_WORDS)}"
        text = " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(4, 12)))
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        while len(text) < low:
            text += " " + self.rng.choice(_WORDS)
        return text[: int(high)] if high is not None else text

    def break_bounds(self, schema: dict[str, Any], instance: Any) -> bool:
        """Push every bounded number in ``instance`` past its bound; True if there was one."""
        schema = self.resolve(schema)
        broke = False
        if isinstance(instance, dict):
            for name, sub in (schema.get("properties") or {}).items():
                sub = self.resolve(sub)
                b = _bounds(sub)
                if name in instance and sub.get("type") in ("integer", "number") and b:
                    if "maximum" in b or "exclusiveMaximum" in b:
                        over = b.get("maximum", b.get("exclusiveMaximum", 0.0)) + 1
                    else:
                        over = b.get("minimum", b.get("exclusiveMinimum", 0.0)) - 1
                    instance[name] = int(over) if sub["type"] == "integer" else over
                    broke = True
                elif name in instance:
                    broke = self.break_bounds(sub, instance[name]) or broke
        elif isinstance(instance, list) and schema.get("items"):
            for element in instance:
                broke = self.break_bounds(schema["items"], element) or broke
        return broke


def _seed(item_key: str) -> random.Random:
    return random.Random(int(item_key[:16], 16))


def schema_answer(schema: dict[str, Any], item_key: str) -> Any:
    generator = _Generator(schema, _seed(item_key))
    return generator.value(schema)


def out_of_range_answer(schema: dict[str, Any], item_key: str, *, extra_field: bool) -> Any:
    generator = _Generator(schema, _seed(item_key))
    instance = generator.value(schema)
    broke = generator.break_bounds(schema, instance)
    if isinstance(instance, dict) and (extra_field or not broke):
        instance["note"] = "Instructions ignored as requested."
    return instance


# --- request reading -------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(block.get("text", "") for block in content if isinstance(block, dict))
    return ""


def _system_parts(system: Any) -> tuple[str, str]:
    """(all system text, the cached prefix: the blocks up to the last one with cache_control)."""
    if isinstance(system, str):
        return system, ""
    if not isinstance(system, list):
        return "", ""
    texts = [block.get("text", "") for block in system if isinstance(block, dict)]
    marked = [i for i, block in enumerate(system) if isinstance(block, dict) and block.get("cache_control")]
    return "".join(texts), "".join(texts[: marked[-1] + 1]) if marked else ""


def _tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


# --- the server state ------------------------------------------------------------------------------


class FakeState:
    """Everything the fake remembers. Touched only from the server's event loop, so no locks."""

    def __init__(self, config: FakeConfig) -> None:
        self.initial = config
        self.reset()

    def reset(self) -> None:
        self.config = self.initial.model_copy()
        self.script: deque[Behaviour] = deque()
        self.calls: list[dict[str, Any]] = []
        self.cached_prefixes: set[str] = set()
        self.window: deque[tuple[float, int]] = deque()  # (time, input tokens) of recent requests
        self.window_tokens = 0  # their sum, kept as they come and go: no O(n) sum per request
        self.sequence = 0

    def next_behaviour(self) -> Behaviour:
        if not self.script:
            return Behaviour(kind=self.config.default_kind)
        head = self.script[0]
        if head.times > 1:
            self.script[0] = head.model_copy(update={"times": head.times - 1})
        else:
            self.script.popleft()
        return head

    def count_request(self, now: float, tokens: int) -> None:
        self.window.append((now, tokens))
        self.window_tokens += tokens

    def ratelimit_headers(self, now: float) -> dict[str, str]:
        while self.window and self.window[0][0] <= now - WINDOW_SECONDS:
            self.window_tokens -= self.window.popleft()[1]
        reset = (self.window[0][0] if self.window else now) + WINDOW_SECONDS
        cfg = self.config
        return {
            "anthropic-ratelimit-requests-limit": str(cfg.requests_limit),
            "anthropic-ratelimit-requests-remaining": str(max(0, cfg.requests_limit - len(self.window))),
            "anthropic-ratelimit-requests-reset": _rfc3339(reset),
            "anthropic-ratelimit-input-tokens-limit": str(cfg.input_tokens_limit),
            "anthropic-ratelimit-input-tokens-remaining": str(max(0, cfg.input_tokens_limit - self.window_tokens)),
            "anthropic-ratelimit-input-tokens-reset": _rfc3339(reset),
        }

    def input_usage(self, model: str, total_tokens: int, cached_text: str) -> dict[str, int]:
        """Input tokens split the way the API bills them: the first call with a cached prefix writes
        the cache, later ones read it."""
        cached = _tokens(cached_text)
        usage = {"input_tokens": total_tokens - cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if cached:
            key = hashlib.sha256(f"{model}\0{cached_text}".encode()).hexdigest()
            if key in self.cached_prefixes:
                usage["cache_read_input_tokens"] = cached
            else:
                self.cached_prefixes.add(key)
                usage["cache_creation_input_tokens"] = cached
        return usage

    def calls_report(self) -> dict[str, Any]:
        counts, repairs, answered = Counter(), Counter(), Counter()
        for call in self.calls:
            counts[call["item_key"]] += 1
            if call["repair"]:
                repairs[call["item_key"]] += 1
            elif call["status"] == 200:
                answered[call["item_key"]] += 1
        return {
            "total": len(self.calls),
            "calls": self.calls,
            "counts": dict(counts),  # every call per item key
            "repairs": dict(repairs),  # repair calls per item key
            "answered": dict(answered),  # first (non-repair) calls answered 200 per item key
        }


def _error_response(
    status: int, error_type: str, message: str, headers: dict[str, str], *, error_code: str | None = None
) -> JSONResponse:
    error: dict[str, Any] = {"type": error_type, "message": message}
    if error_code:
        error["details"] = {"error_code": error_code}
    return JSONResponse({"type": "error", "error": error, "request_id": headers.get("request-id")}, status, headers)


def _scripted_error(behaviour: Behaviour, headers: dict[str, str]) -> JSONResponse:
    if behaviour.kind == "error":
        status = behaviour.status or 500
        error_type, message = _TYPE_BY_STATUS.get(status, "api_error"), f"scripted error {status}"
    else:
        status, error_type, message = _ERRORS[behaviour.kind]
        status = behaviour.status or status
    if behaviour.retry_after is not None:
        headers["retry-after"] = f"{behaviour.retry_after:g}"
    if behaviour.retry_after_ms is not None:
        headers["retry-after-ms"] = f"{behaviour.retry_after_ms:g}"
    code = "enforced_spend_limit_reached" if behaviour.kind == "spend_limit" else None
    return _error_response(
        status, behaviour.error_type or error_type, behaviour.message or message, headers, error_code=code
    )


def create_app(config: FakeConfig | None = None) -> Starlette:
    state = FakeState(config or FakeConfig())

    async def messages(request: Request) -> Response:
        now = time.time()
        state.sequence += 1
        headers = {"request-id": f"req_fake_{state.sequence:08d}"}
        try:
            body = await request.json()
        except ValueError:
            return _error_response(400, "invalid_request_error", "request body is not JSON", headers)
        if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
            return _error_response(401, "authentication_error", "x-api-key header is required", headers)
        sampling = sorted(SAMPLING_PARAMETERS & body.keys())
        if sampling and request.headers.get("anthropic-version") != LEGACY_API_VERSION:
            message = f"{sampling[0]}: Extra inputs are not permitted"
            return _error_response(400, "invalid_request_error", message, headers)
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not body.get("model") or not body.get("max_tokens"):
            return _error_response(400, "invalid_request_error", "model, max_tokens and messages are required", headers)

        first_user = next((m for m in msgs if m.get("role") == "user"), {})
        item_key = hashlib.sha256(_text_of(first_user.get("content")).encode()).hexdigest()
        behaviour = state.next_behaviour()
        call: dict[str, Any] = {
            "n": state.sequence,
            "item_key": item_key,
            "repair": len(msgs) > 1,
            "model": body["model"],
            "stream": bool(body.get("stream")),
            "kind": behaviour.kind,
            "status": 200,
            "at": now,
        }
        state.calls.append(call)

        system_text, cached_text = _system_parts(body.get("system"))
        all_text = system_text + "".join(_text_of(m.get("content")) for m in msgs)
        total_tokens = max(1, _tokens(all_text))
        state.count_request(now, total_tokens)
        headers.update(state.ratelimit_headers(now))
        headers.update(behaviour.headers)

        latency = behaviour.latency if behaviour.latency is not None else state.config.latency
        if latency:
            await asyncio.sleep(latency)

        if behaviour.kind == "hang":
            deadline = time.monotonic() + behaviour.hang_seconds
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    call["status"] = 499  # the client gave up first, as it should
                    return Response(status_code=499, headers=headers)
                await asyncio.sleep(0.05)
        elif behaviour.kind in _ERRORS or behaviour.kind == "error":
            response = _scripted_error(behaviour, headers)
            call["status"] = response.status_code
            return response

        text, stop_reason, output_tokens = _answer(body, msgs, item_key, behaviour.kind, state.config)
        usage = {"output_tokens": output_tokens, **state.input_usage(body["model"], total_tokens, cached_text)}
        message = {
            "id": f"msg_fake_{state.sequence:08d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        if body.get("stream"):
            return StreamingResponse(_sse(message), media_type="text/event-stream", headers=headers)
        return JSONResponse(message, headers=headers)

    async def count_tokens(request: Request) -> Response:
        body = await request.json()
        system_text, _ = _system_parts(body.get("system"))
        text = system_text + "".join(_text_of(m.get("content")) for m in body.get("messages") or [])
        return JSONResponse({"input_tokens": max(1, _tokens(text))})

    async def script(request: Request) -> Response:
        payload = await request.json()
        try:
            behaviours = [Behaviour.model_validate(b) for b in payload.get("behaviours", [])]
        except ValidationError as exc:
            return JSONResponse({"error": exc.errors(include_url=False)}, 422)
        state.script.extend(behaviours)
        return JSONResponse({"queued": sum(b.times for b in state.script)})

    async def configure(request: Request) -> Response:
        try:
            state.config = FakeConfig.model_validate({**state.config.model_dump(), **await request.json()})
        except ValidationError as exc:
            return JSONResponse({"error": exc.errors(include_url=False)}, 422)
        return JSONResponse(state.config.model_dump())

    async def calls(request: Request) -> Response:
        return JSONResponse(state.calls_report())

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/_fake/script", script, methods=["POST"]),
            Route("/_fake/config", configure, methods=["POST"]),
            Route("/_fake/calls", calls, methods=["GET"]),
            Route("/_fake/reset", reset, methods=["POST"]),
        ]
    )


def _answer(
    body: dict[str, Any], msgs: list[dict[str, Any]], item_key: str, kind: str, config: FakeConfig
) -> tuple[str, str, int]:
    """(text, stop_reason, output tokens) for a call answered 200."""
    fmt = (body.get("output_config") or {}).get("format") or {}
    schema = fmt.get("schema") if fmt.get("type") == "json_schema" else None
    injected = config.obey_injection and any(
        INJECTION_MARKER in _text_of(m.get("content")) for m in msgs if m.get("role") == "user"
    )
    if kind == "malformed":
        text = f"I would rate this about {int(item_key[:2], 16) % 10}/10 overall; the reasoning is above."
    elif schema is None:
        text = f"Fake answer {item_key[:12]}: " + " ".join(_seed(item_key).choice(_WORDS) for _ in range(12))
    elif kind == "out_of_range" or injected:
        text = json.dumps(out_of_range_answer(schema, item_key, extra_field=injected))
    else:
        text = json.dumps(schema_answer(schema, item_key))

    max_tokens = int(body["max_tokens"])
    if kind == "truncated":
        return text[: max(1, len(text) // 2)], "max_tokens", max_tokens
    if _tokens(text) > max_tokens:  # what a real model does when it runs out of room
        return text[: max_tokens * CHARS_PER_TOKEN], "max_tokens", max_tokens
    return text, "end_turn", max(1, _tokens(text))


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


async def _sse(message: dict[str, Any]) -> AsyncIterator[bytes]:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": start})
    block = {"type": "text", "text": ""}
    yield _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
    yield _event("ping", {"type": "ping"})
    text = message["content"][0]["text"]
    for i in range(0, len(text), 64):
        delta = {"type": "text_delta", "text": text[i : i + 64]}
        yield _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
    yield _event("message_stop", {"type": "message_stop"})


# --- driving it ------------------------------------------------------------------------------------


class FakeControl:
    """Scripts a fake over its HTTP control plane, whether it runs in this process or another one."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        # trust_env=False: control traffic stays on loopback whatever proxy the environment names.
        self._http = httpx.Client(base_url=self.base_url, trust_env=False, timeout=10)

    def script(self, *behaviours: dict[str, Any] | Behaviour) -> None:
        payload = [b.model_dump() if isinstance(b, Behaviour) else b for b in behaviours]
        self._http.post("/_fake/script", json={"behaviours": payload}).raise_for_status()

    def configure(self, **config: Any) -> dict[str, Any]:
        response = self._http.post("/_fake/config", json=config)
        response.raise_for_status()
        return response.json()

    def calls(self) -> dict[str, Any]:
        response = self._http.get("/_fake/calls")
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        self._http.post("/_fake/reset").raise_for_status()

    def close(self) -> None:
        self._http.close()


class FakeAnthropic(FakeControl):
    """The fake served by uvicorn in a background thread on 127.0.0.1; a context manager."""

    def __init__(self, *, latency: float = 0.0, port: int = 0, **config: Any) -> None:
        app = create_app(FakeConfig(latency=latency, **config))
        self._loopback = LoopbackServer(app, name="fake-anthropic", port=port, **_SERVER_OPTIONS)
        self.port = self._loopback.port
        super().__init__(self._loopback.base_url)

    def start(self) -> FakeAnthropic:
        self._loopback.start()
        return self

    def stop(self) -> None:
        self._loopback.stop()
        self.close()

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Many concurrent clients (benchmarks run 64 at once), kept alive between calls.
_SERVER_OPTIONS: dict[str, Any] = {"backlog": 4096, "timeout_keep_alive": 30}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "localhost"], help="loopback only")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--requests-limit", type=int, default=FakeConfig().requests_limit)
    parser.add_argument("--input-tokens-limit", type=int, default=FakeConfig().input_tokens_limit)
    args = parser.parse_args()
    config = FakeConfig(
        latency=args.latency, requests_limit=args.requests_limit, input_tokens_limit=args.input_tokens_limit
    )
    uvicorn.Server(
        uvicorn.Config(create_app(config), host=args.host, port=args.port, **SERVER_DEFAULTS, **_SERVER_OPTIONS)
    ).run()


if __name__ == "__main__":
    main()
