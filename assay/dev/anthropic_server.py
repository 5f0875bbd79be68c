"""A loopback fake of the Anthropic Messages API (and its Message Batches API), for tests and benchmarks,
driven through the real SDK.

Run it in a background thread::

    with FakeAnthropic(latency=0.0) as fake:
        client = anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0)
        fake.script({"kind": "overloaded", "times": 5}, {"kind": "ok"})

or as its own process (for live workers and benchmarks), scripted over the same HTTP control plane
with ``FakeControl(base_url)``::

    python -m assay.dev.anthropic_server --port 8765 --latency 0.05

API: ``POST /v1/messages`` (JSON or SSE stream), ``POST /v1/messages/count_tokens``, and the batches:
``POST /v1/messages/batches`` (create), ``GET /v1/messages/batches`` (list, newest first, ``limit``/
``after_id``/``before_id``), ``GET``/``DELETE /v1/messages/batches/{id}``, ``POST .../{id}/cancel`` and
``GET .../{id}/results`` (JSON Lines; ``results_url`` names this server, so the SDK's ``results()`` works).
Control plane: ``POST /_fake/script`` (``{"behaviours": [...]}`` appended to the queue, one per realtime
call), ``POST /_fake/config`` (partial ``FakeConfig``), ``POST /_fake/batch_outcomes`` (below),
``GET /_fake/calls``, ``POST /_fake/reset`` (also forgets batches and batch outcomes).

Rate limits: token buckets for requests, input tokens and output tokens (``assay/dev/ratelimit.py``),
reported on every answer in ``anthropic-ratelimit-*`` headers (RFC 3339 resets). By default a bucket holds
a whole minute's limit and nothing is refused; ``enforce_limits=True`` with ``burst_seconds=1`` answers
429 with a ``retry-after`` to what the buckets cannot cover, as the real API enforces its limits.

Trouble for a time window (an outage, a 429 storm): ``configure(default_kind="overloaded")`` (or
``"rate_limit"`` with ``default_retry_after=5``, sent as ``retry-after: 5``) makes every unscripted call
answer so until ``configure(default_kind="ok", default_retry_after=None)`` ends the window;
``default_share=0.3`` makes it a random 30 % of them (a storm of random 429s among answered calls).

Answers follow the schema in ``output_config.format.schema`` and are a deterministic function of
the first user message, so repeated runs agree. Calls are counted per *item key*: the sha256 of the
first user message's text; a repair call (any conversation longer than one message) counts against
the same key and is flagged ``repair``. Every call record says its ``lane`` ("realtime" or "batch"; batch
ones also carry ``batch_id`` and ``custom_id``); ``/_fake/calls`` adds per-lane counts (``by_lane``) and
how often each batch endpoint was hit (``batch_api``).

Repeats (calibration, the judge's noise): ``configure(repeat_spread=0.1)`` makes the n-th answered
first call (n = 0, 1, 2, ...; repairs answer like the call they repair) for one item key move every
number the schema bounds by +spread (n even) or -spread (n odd) of its range (maximum - minimum;
rounded for integers; a number with a bound missing moves by spread itself). The base answer is first
pulled inside [minimum + move, maximum - move], so the answers stay in range and the spread is exact:
a 0..1 score answers base' + 0.1, base' - 0.1, base' + 0.1, ... and a 1..5 scale with spread 0.25
moves by one step. Enumerations and booleans do not move. ``0`` (the default) answers alike every time.

Batches: a batch is ``in_progress`` for ``batch_processing_seconds`` (requests finish evenly over that
time), then ``ended``, its results made by the same code as ``/v1/messages`` answers (same text, same
usage and prompt-cache accounting), one call each for succeeded and errored requests. Results come in
reverse submission order, as the real API promises no order. Reading results before the end is a 400.
A cancel makes the batch ``canceling`` for ``batch_cancel_seconds``, then ``ended``; requests not yet
finished when it came are ``canceled``. As in the real API, a batch's envelope is checked at create
(400: custom_ids unique and ``^[a-zA-Z0-9_-]{1,64}$``, at most 100,000 requests) but each request's
``params`` only while processing: invalid ones (sampling parameters, ``stream``, missing fields) end
``errored`` with the invalid_request_error ``/v1/messages`` would answer, and are not counted as calls.
The realtime script queue never applies to batches; their outcomes are scripted with::

    POST /_fake/batch_outcomes {"outcomes": {"<custom_id>": "errored"}, "every_nth": {"n": 5, "outcome": "expired"}}

An outcome is one of succeeded, errored (api_error), expired, malformed (text that is not JSON),
out_of_range (JSON past the schema's bounds, or a label its enum lacks), truncated (stop_reason
max_tokens). ``outcomes`` are merged into those pending, and each applies once: to the next batch
created that holds that custom_id.
``every_nth`` (the 5th, 10th, ... request of every batch created from then on; a custom_id outcome wins)
replaces the previous rule, or with ``null`` clears it. The answer is what is pending. ``FakeControl``
wraps it as ``batch_outcomes(outcomes, every_nth=..., nth_outcome=...)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import secrets
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self

import httpx
import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from assay.dev.fake_answers import (
    _ERRORS,
    _OUTCOME_KIND,
    _TYPE_BY_STATUS,
    _WORDS,
    BATCH_ENDPOINTS,
    BATCH_EXPIRY_SECONDS,
    CHARS_PER_TOKEN,
    CUSTOM_ID,
    INJECTION_MARKER,
    LEGACY_API_VERSION,
    MAX_BATCH_BYTES,
    MAX_BATCH_REQUESTS,
    BatchOutcome,
    BatchOutcomes,
    Behaviour,
    BehaviourKind,
    EveryNth,
    FakeConfig,
    _input_size,
    _invalid_params,
    _item_key,
    _rfc3339,
    _seed,
    _system_parts,
    _text_of,
    _tokens,
    max_in_range_answer,
    out_of_range_answer,
    pairwise_answer,
    reconfigure,
    schema_answer,
    script_behaviours,
    wait_as_drawn,
)
from assay.dev.loopback import SERVER_DEFAULTS, LoopbackServer
from assay.dev.ratelimit import (
    Costs,
    ProviderLimits,
    add_limit_options,
    anthropic_headers,
    limit_options,
    retry_after,
)

# --- batches ---------------------------------------------------------------------------------------


@dataclass
class _Batch:
    id: str
    custom_ids: list[str]
    params: list[dict[str, Any]]
    outcomes: list[BatchOutcome]
    legacy_api: bool  # the anthropic-version at create, which decides whether sampling params pass
    created_at: float
    processing_seconds: float
    ends_at: float  # when processing ends (moved earlier by a cancel)
    cancel_initiated_at: float | None = None
    finished_before_cancel: int | None = None  # requests done when the cancel came; the rest are canceled
    results: list[dict[str, Any]] | None = None  # once ended: one line per request, in submission order

    def status(self) -> Literal["in_progress", "canceling", "ended"]:
        if self.results is not None:
            return "ended"
        return "in_progress" if self.cancel_initiated_at is None else "canceling"

    def finished_by(self, now: float) -> int:
        """Requests done by ``now``: they finish evenly over the processing time."""
        if self.processing_seconds <= 0:
            return len(self.params)
        done = len(self.params) * (now - self.created_at) / self.processing_seconds
        return min(len(self.params), max(0, math.floor(done)))

    def to_json(self, base_url: str) -> dict[str, Any]:
        ended = self.results is not None
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if ended:  # the real API tallies only once the whole batch has ended
            counts.update(Counter(line["result"]["type"] for line in self.results or []))
        else:
            counts["processing"] = len(self.params)
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status(),
            "request_counts": counts,
            "created_at": _rfc3339(self.created_at),
            "expires_at": _rfc3339(self.created_at + BATCH_EXPIRY_SECONDS),
            "ended_at": _rfc3339(self.ends_at) if ended else None,
            "cancel_initiated_at": _rfc3339(self.cancel_initiated_at) if self.cancel_initiated_at else None,
            "archived_at": None,
            "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if ended else None,
        }


def _errored(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "errored", "error": {"type": "error", "error": {"type": error_type, "message": message}}}


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
        self.limits = self.new_limits()
        self.limits_from = self._limit_settings()
        self.sequence = 0
        self.batches: dict[str, _Batch] = {}  # in creation order
        self.batch_outcomes: dict[str, BatchOutcome] = {}  # by custom_id, each used by one batch
        self.every_nth: EveryNth | None = None
        self.batch_api: Counter[str] = Counter(dict.fromkeys(BATCH_ENDPOINTS, 0))
        self.default_draws = random.Random(0)  # which unscripted calls default_share picks: repeatable
        self.answers_per_key: Counter[str] = Counter()  # first calls answered per item key (repeat_spread)

    def next_behaviour(self, model: str = "") -> Behaviour:
        if not self.script and model in self.config.model_kinds:
            return Behaviour(kind=self.config.model_kinds[model])
        if not self.script:
            if self.config.default_share < 1 and self.default_draws.random() >= self.config.default_share:
                return Behaviour(kind="ok")
            return Behaviour(kind=self.config.default_kind, retry_after=self.config.default_retry_after)
        head = self.script[0]
        if head.times > 1:
            self.script[0] = head.model_copy(update={"times": head.times - 1})
        else:
            self.script.popleft()
        return head

    def new_limits(self) -> ProviderLimits:
        cfg = self.config
        limits = {
            "requests": cfg.requests_limit,
            "input_tokens": cfg.input_tokens_limit,
            "output_tokens": cfg.output_tokens_limit,
        }
        return ProviderLimits(limits, cfg.burst_seconds)

    def _limit_settings(self) -> tuple[Any, ...]:
        return tuple(getattr(self.config, n) for n in type(self.config).model_fields if n.endswith(("_limit", "burst_seconds")))

    def reconfigured(self) -> None:
        """New limits start with full buckets; other settings leave them as they are."""
        if self._limit_settings() != self.limits_from:
            self.limits, self.limits_from = self.new_limits(), self._limit_settings()

    def admit(self, costs: Costs, now: float) -> float:
        """0.0 when the buckets take the request (counted), else its retry-after (nothing taken)."""
        return self.limits.admit(costs, now, enforce=self.config.enforce_limits)

    def ratelimit_headers(self, now: float) -> dict[str, str]:
        return anthropic_headers(self.limits, now)

    def input_usage(self, model: str, total_tokens: int, cached_text: str) -> dict[str, int]:
        """Input tokens split the way the API bills them: the first call with a cached prefix writes
        the cache, later ones read it; a prefix under ``min_cacheable_tokens`` is not cached."""
        cached = _tokens(cached_text)
        if cached < self.config.min_cacheable_tokens:
            cached = 0  # the real API sends a short prefix uncached, at the input price
        usage = {"input_tokens": total_tokens - cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if cached:
            key = hashlib.sha256(f"{model}\0{cached_text}".encode()).hexdigest()
            if key in self.cached_prefixes:
                usage["cache_read_input_tokens"] = cached
            else:
                self.cached_prefixes.add(key)
                usage["cache_creation_input_tokens"] = cached
        return usage

    def record_call(
        self, body: dict[str, Any], item_key: str, kind: BehaviourKind, at: float, **fields: Any
    ) -> dict[str, Any]:
        """Note a call; ``fields`` override the defaults (a batch's lane, a refused call's status, ...)."""
        call: dict[str, Any] = {
            "n": self.sequence,
            "item_key": item_key,
            "repair": len(body["messages"]) > 1,
            "model": body["model"],
            "stream": bool(body.get("stream")),
            "kind": kind,
            "status": 200,
            "at": at,
            "lane": "realtime",
            "batch_id": None,
            "custom_id": None,
            **fields,
        }
        self.calls.append(call)
        return call

    def message(self, body: dict[str, Any], item_key: str, kind: BehaviourKind) -> dict[str, Any]:
        """The Message answering ``body``: one code path for both lanes, so their verdicts agree."""
        total_tokens, cached_text = _input_size(body)
        if len(body["messages"]) == 1:
            self.answers_per_key[item_key] += 1
        repeat = max(0, self.answers_per_key[item_key] - 1)  # a repair answers like the call it repairs
        text, stop_reason, output_tokens = _answer(body, body["messages"], item_key, kind, self.config, repeat)
        usage = {"output_tokens": output_tokens, **self.input_usage(body["model"], total_tokens, cached_text)}
        return {
            "id": f"msg_fake_{self.sequence:08d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def create_batch(self, custom_ids: list[str], params: list[dict[str, Any]], legacy_api: bool) -> _Batch:
        now = time.time()
        outcomes: list[BatchOutcome] = []
        for position, custom_id in enumerate(custom_ids, start=1):
            nth = self.every_nth
            default: BatchOutcome = nth.outcome if nth and position % nth.n == 0 else "succeeded"
            outcomes.append(self.batch_outcomes.pop(custom_id, default))
        seconds = self.config.batch_processing_seconds
        batch_id = f"msgbatch_{secrets.token_hex(12)}"  # unique across resets, so a stale poller finds nothing
        batch = _Batch(batch_id, custom_ids, params, outcomes, legacy_api, now, seconds, now + seconds)
        self.batches[batch.id] = batch
        return batch

    def settle_batches(self, now: float) -> None:
        """End every batch whose time has come. Done lazily, whenever anyone looks, so nothing runs in
        the background and a batch's calls are recorded before any report could miss them."""
        for batch in self.batches.values():
            if batch.results is None and batch.ends_at <= now:
                self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        lines = []
        for i, (custom_id, params, outcome) in enumerate(zip(batch.custom_ids, batch.params, batch.outcomes)):
            canceled = batch.finished_before_cancel is not None and i >= batch.finished_before_cancel
            result = {"type": "canceled"} if canceled else self._batch_result(batch, custom_id, params, outcome)
            lines.append({"custom_id": custom_id, "result": result})
        batch.results = lines

    def _batch_result(
        self, batch: _Batch, custom_id: str, params: dict[str, Any], outcome: BatchOutcome
    ) -> dict[str, Any]:
        problem = _invalid_params(params, legacy_api=batch.legacy_api)
        if problem is None and params.get("stream"):
            problem = "stream: Extra inputs are not permitted"  # batch params are non-streaming
        if problem:  # refused before any model call, as /v1/messages refuses it with a 400: not a call
            return _errored("invalid_request_error", problem)
        if outcome == "expired":
            return {"type": "expired"}
        item_key, kind = _item_key(params["messages"]), _OUTCOME_KIND[outcome]
        self.sequence += 1
        lane = {"lane": "batch", "batch_id": batch.id, "custom_id": custom_id}
        call = self.record_call(params, item_key, kind, batch.ends_at, **lane)
        if outcome == "errored":
            call["status"] = 500
            return _errored("api_error", "Internal server error")
        return {"type": "succeeded", "message": self.message(params, item_key, kind)}

    def calls_report(self) -> dict[str, Any]:
        counts, repairs, answered = Counter(), Counter(), Counter()
        by_lane: dict[str, Counter[str]] = {"realtime": Counter(), "batch": Counter()}
        for call in self.calls:
            counts[call["item_key"]] += 1
            by_lane[call["lane"]][call["item_key"]] += 1
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
            "by_lane": {lane: dict(c) for lane, c in by_lane.items()},  # every call per lane and item key
            "batch_api": dict(self.batch_api),  # requests per batch endpoint, whatever their answer
        }


def script_batch_outcomes(state: FakeState, payload: Any) -> JSONResponse:
    """``POST /_fake/batch_outcomes`` (this fake's and the OpenAI fake's): merge, answer what is pending."""
    try:
        update = BatchOutcomes.model_validate(payload)
    except ValidationError as exc:
        return JSONResponse({"error": exc.errors(include_url=False)}, 422)
    state.batch_outcomes.update(update.outcomes)
    if "every_nth" in update.model_fields_set:
        state.every_nth = update.every_nth
    return JSONResponse(BatchOutcomes(outcomes=state.batch_outcomes, every_nth=state.every_nth).model_dump())


def _authenticated(request: Request) -> bool:
    return bool(request.headers.get("x-api-key") or request.headers.get("authorization"))


def _legacy_api(request: Request) -> bool:
    return request.headers.get("anthropic-version") == LEGACY_API_VERSION


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
        if not _authenticated(request):
            return _error_response(401, "authentication_error", "x-api-key header is required", headers)
        problem = _invalid_params(body, legacy_api=_legacy_api(request))
        if problem:
            return _error_response(400, "invalid_request_error", problem, headers)

        item_key = _item_key(body["messages"])
        reserved, input_tokens = int(body.get("max_tokens") or 0), _input_size(body)[0]
        wait = state.admit(Costs(1, input_tokens, reserved), now)
        if wait:
            # Refused by the buckets: recorded as a call answered 429, before any behaviour is drawn.
            state.record_call(body, item_key, "rate_limit", now, status=429, limit_tokens=input_tokens)
            headers.update(state.ratelimit_headers(now))
            headers["retry-after"] = retry_after(wait)
            return _error_response(429, "rate_limit_error", _ERRORS["rate_limit"][2], headers)
        behaviour = state.next_behaviour(body["model"])
        call = state.record_call(body, item_key, behaviour.kind, now, limit_tokens=input_tokens)
        headers.update(state.ratelimit_headers(now))
        headers.update(behaviour.headers)

        gave_up = await wait_as_drawn(behaviour, state.config, request, call, headers)
        if gave_up is not None:
            return gave_up
        if behaviour.kind in _ERRORS or behaviour.kind == "error":
            state.limits.give_back("output_tokens", reserved, time.time())  # an error answers no tokens
            response = _scripted_error(behaviour, headers)
            call["status"] = response.status_code
            return response

        message = state.message(body, item_key, behaviour.kind)
        state.limits.give_back("output_tokens", reserved - message["usage"]["output_tokens"], time.time())
        if body.get("stream"):
            return StreamingResponse(_sse(message), media_type="text/event-stream", headers=headers)
        return JSONResponse(message, headers=headers)

    async def count_tokens(request: Request) -> Response:
        body = await request.json()
        system_text, _ = _system_parts(body.get("system"))
        text = system_text + "".join(_text_of(m.get("content")) for m in body.get("messages") or [])
        return JSONResponse({"input_tokens": max(1, _tokens(text))})

    def batch_request(request: Request, endpoint: str) -> tuple[dict[str, str], Response | None]:
        """The common start of every batch endpoint: count it, name it, check the key, end due batches."""
        state.batch_api[endpoint] += 1
        state.sequence += 1
        headers = {"request-id": f"req_fake_{state.sequence:08d}"}
        state.settle_batches(time.time())
        if not _authenticated(request):
            return headers, _error_response(401, "authentication_error", "x-api-key header is required", headers)
        return headers, None

    def find_batch(request: Request, endpoint: str) -> tuple[dict[str, str], _Batch | Response]:
        """The by-id endpoints' common start: count and check the call, then look the batch up."""
        headers, refused = batch_request(request, endpoint)
        if refused:
            return headers, refused
        batch_id = request.path_params["batch_id"]
        batch = state.batches.get(batch_id)
        if batch is None:
            return headers, _error_response(404, "not_found_error", f"No message batch found with id {batch_id!r}", headers)
        return headers, batch

    def base_url(request: Request) -> str:
        return str(request.base_url).rstrip("/")  # the address the client used: loopback, and this port

    async def create_batch(request: Request) -> Response:
        headers, refused = batch_request(request, "create")
        raw = await request.body()
        if refused:
            return refused
        if len(raw) > MAX_BATCH_BYTES:
            return _error_response(413, "request_too_large", "Request exceeds the maximum size of 256 MB", headers)
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_response(400, "invalid_request_error", "request body is not JSON", headers)
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return _error_response(400, "invalid_request_error", "requests: Field required (a non-empty list)", headers)
        if len(requests) > MAX_BATCH_REQUESTS:
            message = f"requests: List should have at most {MAX_BATCH_REQUESTS} items after validation"
            return _error_response(400, "invalid_request_error", message, headers)
        custom_ids: list[str] = []
        for i, entry in enumerate(requests):
            custom_id = entry.get("custom_id") if isinstance(entry, dict) else None
            if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
                message = f"requests.{i}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'"
                return _error_response(400, "invalid_request_error", message, headers)
            if not isinstance(entry.get("params"), dict):
                return _error_response(400, "invalid_request_error", f"requests.{i}.params: Field required", headers)
            custom_ids.append(custom_id)
        duplicates = sorted(k for k, n in Counter(custom_ids).items() if n > 1)
        if duplicates:
            message = f"requests: custom_id must be unique within a batch; repeated: {', '.join(duplicates[:5])}"
            return _error_response(400, "invalid_request_error", message, headers)
        batch = state.create_batch(custom_ids, [entry["params"] for entry in requests], _legacy_api(request))
        return JSONResponse(batch.to_json(base_url(request)), headers=headers)

    async def list_batches(request: Request) -> Response:
        headers, refused = batch_request(request, "list")
        if refused:
            return refused
        try:
            limit = int(request.query_params.get("limit", 20))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 1000:
            return _error_response(400, "invalid_request_error", "limit: must be between 1 and 1000", headers)
        newest_first = list(reversed(state.batches.values()))
        ids = [b.id for b in newest_first]
        after, before = request.query_params.get("after_id"), request.query_params.get("before_id")
        if before in ids:
            page = newest_first[max(0, ids.index(before) - limit) : ids.index(before)]
            has_more = ids.index(before) - limit > 0
        else:
            start = ids.index(after) + 1 if after in ids else 0
            page = newest_first[start : start + limit]
            has_more = start + limit < len(ids)
        data = [b.to_json(base_url(request)) for b in page]
        first_id, last_id = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return JSONResponse(
            {"data": data, "has_more": has_more, "first_id": first_id, "last_id": last_id}, headers=headers
        )

    async def retrieve_batch(request: Request) -> Response:
        headers, batch = find_batch(request, "retrieve")
        if isinstance(batch, Response):
            return batch
        return JSONResponse(batch.to_json(base_url(request)), headers=headers)

    async def cancel_batch(request: Request) -> Response:
        headers, batch = find_batch(request, "cancel")
        if isinstance(batch, Response):
            return batch
        if batch.status() == "in_progress":  # canceling again, or an ended batch, is left as it is
            now = time.time()
            batch.cancel_initiated_at = now
            batch.finished_before_cancel = batch.finished_by(now)
            batch.ends_at = min(batch.ends_at, now + state.config.batch_cancel_seconds)
            state.settle_batches(now)  # with no canceling time it ends at once
        return JSONResponse(batch.to_json(base_url(request)), headers=headers)

    async def delete_batch(request: Request) -> Response:
        headers, batch = find_batch(request, "delete")
        if isinstance(batch, Response):
            return batch
        if batch.results is None:
            message = f"Message batch {batch.id} is still {batch.status()}; cancel it and wait for it to end first."
            return _error_response(400, "invalid_request_error", message, headers)
        del state.batches[batch.id]
        return JSONResponse({"id": batch.id, "type": "message_batch_deleted"}, headers=headers)

    async def batch_results(request: Request) -> Response:
        headers, batch = find_batch(request, "results")
        if isinstance(batch, Response):
            return batch
        if batch.results is None:
            message = f"Message batch {batch.id} has not ended: it is {batch.status()}."
            return _error_response(400, "invalid_request_error", message, headers)
        # Reversed: the real API promises no order, and callers must match results by custom_id.
        jsonl = b"".join(json.dumps(line).encode() + b"\n" for line in reversed(batch.results))
        return Response(jsonl, media_type="application/binary", headers=headers)

    async def script_batches(request: Request) -> Response:
        return script_batch_outcomes(state, await request.json())

    async def script(request: Request) -> Response:
        return script_behaviours(state, await request.json(), Behaviour)

    async def configure(request: Request) -> Response:
        return reconfigure(state, await request.json(), FakeConfig)

    async def calls(request: Request) -> Response:
        state.settle_batches(time.time())
        return JSONResponse(state.calls_report())

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/messages/batches", create_batch, methods=["POST"]),
            Route("/v1/messages/batches", list_batches, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", retrieve_batch, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", delete_batch, methods=["DELETE"]),
            Route("/v1/messages/batches/{batch_id}/cancel", cancel_batch, methods=["POST"]),
            Route("/v1/messages/batches/{batch_id}/results", batch_results, methods=["GET"]),
            Route("/_fake/script", script, methods=["POST"]),
            Route("/_fake/batch_outcomes", script_batches, methods=["POST"]),
            Route("/_fake/config", configure, methods=["POST"]),
            Route("/_fake/calls", calls, methods=["GET"]),
            Route("/_fake/reset", reset, methods=["POST"]),
        ]
    )


def _answer(
    body: dict[str, Any], msgs: list[dict[str, Any]], item_key: str, kind: str, config: FakeConfig, repeat: int = 0
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
    elif kind == "out_of_range" or (injected and config.injection_answer == "out_of_range"):
        text = json.dumps(out_of_range_answer(schema, item_key, extra_field=injected))
    elif injected:
        text = json.dumps(max_in_range_answer(schema, item_key))
    elif (preferred := pairwise_answer(schema, _text_of(msgs[0].get("content")), config)) is not None:
        text = json.dumps(preferred)
    else:
        answer = schema_answer(schema, item_key, config.min_array_items, repeat=repeat, spread=config.repeat_spread)
        if isinstance(answer, dict):
            answer.update(config.model_answers.get(body.get("model", ""), {}))
        text = json.dumps(answer)

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

    def batch_outcomes(
        self,
        outcomes: Mapping[str, BatchOutcome] | None = None,
        *,
        every_nth: int | None = None,
        nth_outcome: BatchOutcome = "expired",
    ) -> dict[str, Any]:
        """Script batch results: ``outcomes`` by custom_id (each used once), and, when ``every_nth`` is
        given, ``nth_outcome`` for every nth request of each batch from now on. Returns what is pending."""
        payload: dict[str, Any] = {"outcomes": dict(outcomes or {})}
        if every_nth is not None:
            payload["every_nth"] = {"n": every_nth, "outcome": nth_outcome}
        response = self._http.post("/_fake/batch_outcomes", json=payload)
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


class ServedFake(FakeControl):
    """A fake app served by uvicorn in a background thread on 127.0.0.1, with its control client;
    a context manager (both providers' fakes)."""

    def __init__(self, app: Starlette, name: str, port: int) -> None:
        self._loopback = LoopbackServer(app, name=name, port=port, **_SERVER_OPTIONS)
        self.port = self._loopback.port
        super().__init__(self._loopback.base_url)

    def start(self) -> Self:
        self._loopback.start()
        return self

    def stop(self) -> None:
        self._loopback.stop()
        self.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeAnthropic(ServedFake):
    """The fake served by uvicorn in a background thread on 127.0.0.1; a context manager."""

    def __init__(self, *, latency: float = 0.0, port: int = 0, **config: Any) -> None:
        super().__init__(create_app(FakeConfig(latency=latency, **config)), "fake-anthropic", port)


# Many concurrent clients (benchmarks run 64 at once), kept alive between calls.
_SERVER_OPTIONS: dict[str, Any] = {"backlog": 4096, "timeout_keep_alive": 30}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "localhost"], help="loopback only")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--batch-processing-seconds", type=float, default=FakeConfig().batch_processing_seconds)
    add_limit_options(parser, FakeConfig())
    args = parser.parse_args()
    config = FakeConfig(latency=args.latency, batch_processing_seconds=args.batch_processing_seconds, **limit_options(args))
    uvicorn.Server(
        uvicorn.Config(create_app(config), host=args.host, port=args.port, **SERVER_DEFAULTS, **_SERVER_OPTIONS)
    ).run()


if __name__ == "__main__":
    main()
