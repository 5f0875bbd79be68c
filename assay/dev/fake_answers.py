"""What the fake judge answers (:mod:`assay.dev.anthropic_server`, and the OpenAI fake built on it):
the behaviours a test scripts, the fake's configuration, the request checks, and answers that follow
the request's JSON schema, a deterministic function of the item."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
import time
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

INJECTION_MARKER = "IGNORE PREVIOUS INSTRUCTIONS"
# API version 2026-10-21 (the one SDK 2.x sends) removed sampling parameters: the real API answers 400.
SAMPLING_PARAMETERS = frozenset({"temperature", "top_p", "top_k"})
LEGACY_API_VERSION = "2023-06-01"
CHARS_PER_TOKEN = 4
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024
BATCH_EXPIRY_SECONDS = 24 * 3600.0
BATCH_ENDPOINTS = ("create", "retrieve", "list", "results", "cancel", "delete")

BehaviourKind = Literal[
    "ok",  # a valid answer (plain text without a schema)
    "malformed",  # an answer that is not JSON
    "truncated",  # half an answer, stop_reason "max_tokens"
    "out_of_range",  # JSON that breaks the schema's bounds or enums (or, without either, adds a field)
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
    default_retry_after: float | None = Field(
        None, ge=0, description="Seconds sent as retry-after with the errors default_kind answers; None: no header."
    )
    default_share: float = Field(
        1.0, ge=0, le=1, description="Share of unscripted calls default_kind answers, drawn at random with a fixed"
        " seed (the rest are answered ok): 0.3 with rate_limit is a storm of random 429s.",
    )
    obey_injection: bool = Field(
        True, description=f"Obey prompts containing {INJECTION_MARKER!r}: answer as injection_answer says."
    )
    injection_answer: Literal["out_of_range", "max_in_range"] = Field(
        "out_of_range",
        description="out_of_range: JSON past the schema's bounds, with a field it does not name; max_in_range: "
        "JSON the schema accepts, every bounded number at its maximum (an injection a schema cannot stop).",
    )
    min_array_items: int = Field(
        0, ge=0, description="Arrays in schema-following answers get at least this many items (as the schema allows)."
    )
    requests_limit: int = Field(4000, ge=1, description="Requests a minute (anthropic-ratelimit-requests-*).")
    input_tokens_limit: int = Field(2_000_000, ge=1, description="Input tokens a minute (-input-tokens-*).")
    output_tokens_limit: int = Field(
        400_000, ge=1, description="Output tokens a minute (-output-tokens-*): max_tokens reserved, the unused part given back."
    )
    burst_seconds: float = Field(
        60.0, gt=0, le=60, description="Seconds of each limit its token bucket holds (assay/dev/ratelimit.py): 60 is"
        " the minute the limit names; providers enforce about 1.",
    )
    enforce_limits: bool = Field(
        False, description="Answer 429 rate_limit_error with retry-after when the buckets cannot cover a request"
        " (off: the headers report the buckets, and nothing is refused for them).",
    )
    batch_processing_seconds: float = Field(0.5, ge=0, description="How long a new batch stays in_progress.")
    repeat_spread: float = Field(
        0.0, ge=0, le=0.5, description="The n-th answer for one item key moves every bounded number by +spread "
        "(n even) or -spread (n odd) of its range, staying in range (see the module docstring); 0: no spread.",
    )
    batch_cancel_seconds: float = Field(0.1, ge=0, description="How long a canceled batch stays canceling.")
    min_cacheable_tokens: int = Field(
        0,
        ge=0,
        description="A cache_control prefix shorter than this is not cached, as the real API does below a model's "
        "minimum (1024 tokens for Sonnet and Opus); 0 caches every marked prefix.",
    )
    pairwise_preference: Literal["none", "longer", "marker", "first"] = Field(
        "none", description="How a pairwise verdict (a label schema of a, b, tie) is answered: longer (the longer "
        "output wins, equal lengths tie), marker (the output holding pairwise_marker wins, both or neither tie), first "
        "(always a: pure position bias); none: like any schema. The outputs are read under '### Output A' and "
        "'### Output B' in the user message (the default pairwise prompt).",
    )
    pairwise_marker: str = Field("[BEST]", min_length=1, description="What pairwise_preference marker looks for.")
    model_answers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="By model name: fields set in every schema-following answer of that model "
        "(a scripted juror: {'contrarian': {'passed': False}} always fails the output).",
    )
    model_kinds: dict[str, BehaviourKind] = Field(
        default_factory=dict, description="By model name: what unscripted calls to that model answer instead of "
        "default_kind (a juror that always fails: {'broken': 'server_error'}).",
    )


BatchOutcome = Literal["succeeded", "errored", "expired", "malformed", "out_of_range", "truncated"]
# The realtime behaviour each outcome answers like; it is the ``kind`` on the call record.
_OUTCOME_KIND: dict[str, BehaviourKind] = {
    "succeeded": "ok",
    "errored": "server_error",
    "malformed": "malformed",
    "out_of_range": "out_of_range",
    "truncated": "truncated",
}


class EveryNth(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(..., ge=1)
    outcome: BatchOutcome


class BatchOutcomes(BaseModel):
    """The body of ``POST /_fake/batch_outcomes``."""

    model_config = ConfigDict(extra="forbid")

    outcomes: dict[str, BatchOutcome] = Field(default_factory=dict)
    every_nth: EveryNth | None = None


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
    def __init__(self, root: dict[str, Any], rng: random.Random, min_array_items: int = 0) -> None:
        self.defs = root.get("$defs") or root.get("definitions") or {}
        self.rng = rng
        self.min_array_items = min_array_items

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
            low = min(max(low, self.min_array_items), max(low, high))
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

    def spread(self, schema: dict[str, Any], instance: Any, share: float) -> None:
        """Move every bounded number in ``instance`` by ``share`` of its range (signed), first pulling
        it inside the bounds by that move so the moved value stays in range."""
        schema = self.resolve(schema)
        if isinstance(instance, dict):
            for name, sub in (schema.get("properties") or {}).items():
                sub = self.resolve(sub)
                if name not in instance:
                    continue
                if sub.get("type") in ("integer", "number") and not _string_choices(sub):
                    instance[name] = _moved(instance[name], _bounds(sub), share, integer=sub["type"] == "integer")
                else:
                    self.spread(sub, instance[name], share)
        elif isinstance(instance, list) and schema.get("items"):
            for element in instance:
                self.spread(schema["items"], element, share)

    def max_bounds(self, schema: dict[str, Any], instance: Any) -> None:
        """Set every number in ``instance`` that has a maximum to that maximum."""
        schema = self.resolve(schema)
        if isinstance(instance, dict):
            for name, sub in (schema.get("properties") or {}).items():
                sub = self.resolve(sub)
                if name not in instance:
                    continue
                top = _bounds(sub).get("maximum")
                if sub.get("type") in ("integer", "number") and top is not None:
                    instance[name] = int(top) if sub["type"] == "integer" else top
                else:
                    self.max_bounds(sub, instance[name])
        elif isinstance(instance, list) and schema.get("items"):
            for element in instance:
                self.max_bounds(schema["items"], element)

    def break_bounds(self, schema: dict[str, Any], instance: Any) -> bool:
        """Push every bounded number in ``instance`` past its bound and give every enumerated string a
        value the enum does not list (a judge naming a label the rubric has not got); True if there was one."""
        schema = self.resolve(schema)
        broke = False
        if isinstance(instance, dict):
            for name, sub in (schema.get("properties") or {}).items():
                sub = self.resolve(sub)
                b = _bounds(sub)
                if name in instance and _string_choices(sub):
                    instance[name] = _unlisted(_string_choices(sub))
                    broke = True
                elif name in instance and sub.get("type") in ("integer", "number") and b:
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


def _moved(value: float, bounds: dict[str, float], share: float, *, integer: bool) -> int | float:
    low = bounds.get("minimum", bounds.get("exclusiveMinimum"))
    high = bounds.get("maximum", bounds.get("exclusiveMaximum"))
    move = abs(share) * (high - low) if low is not None and high is not None else abs(share)
    if integer:
        move = round(move)
    base = value
    if low is not None:
        base = max(base, low + move)
    if high is not None:
        base = min(base, high - move)
    moved = base + math.copysign(move, share)
    return int(round(moved)) if integer else round(moved, 10)


def _string_choices(schema: dict[str, Any]) -> list[str]:
    """The strings an enumerated string field allows (``enum``, or ``const`` alone), else []."""
    choices = schema["enum"] if schema.get("enum") else [schema["const"]] if "const" in schema else []
    return choices if choices and all(isinstance(c, str) for c in choices) else []


def _unlisted(choices: list[str]) -> str:
    label = "unlisted"
    while label in choices:
        label += "_label"
    return label


def _seed(item_key: str) -> random.Random:
    return random.Random(int(item_key[:16], 16))


def schema_answer(
    schema: dict[str, Any], item_key: str, min_array_items: int = 0, *, repeat: int = 0, spread: float = 0.0
) -> Any:
    """The answer for an item key; with ``spread``, its ``repeat``-th answer (see the module docstring)."""
    generator = _Generator(schema, _seed(item_key), min_array_items)
    instance = generator.value(schema)
    if spread:
        generator.spread(schema, instance, spread if repeat % 2 == 0 else -spread)
    return instance


_PAIR_OUTPUTS = re.compile(r"### Output A\n(?P<a>.*?)\n\n### Output B\n(?P<b>.*)", re.DOTALL)
PAIRWISE_LABELS = ["a", "b", "tie"]


def pairwise_answer(schema: dict[str, Any], user_text: str, config: FakeConfig) -> dict[str, str] | None:
    """A scripted pairwise verdict (``pairwise_preference``), or None when none applies: no preference
    set, a schema that is not the a / b / tie label, or a prompt without the two output sections."""
    label_schema = (schema.get("properties") or {}).get("label") or {}
    if config.pairwise_preference == "none" or sorted(label_schema.get("enum") or []) != PAIRWISE_LABELS:
        return None
    found = _PAIR_OUTPUTS.search(user_text)
    if found is None:
        return None
    a, b = found.group("a").rstrip("\n"), found.group("b").rstrip("\n")
    if config.pairwise_preference == "first":
        label = "a"
    elif config.pairwise_preference == "longer":
        label = "tie" if len(a) == len(b) else ("a" if len(a) > len(b) else "b")
    else:
        marked = (config.pairwise_marker in a, config.pairwise_marker in b)
        label = {(True, False): "a", (False, True): "b"}.get(marked, "tie")
    return {"reasoning": f"scripted preference {config.pairwise_preference}: {label}", "label": label}


def max_in_range_answer(schema: dict[str, Any], item_key: str) -> Any:
    generator = _Generator(schema, _seed(item_key))
    instance = generator.value(schema)
    generator.max_bounds(schema, instance)
    return instance


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


def _item_key(msgs: list[dict[str, Any]]) -> str:
    first_user = next((m for m in msgs if m.get("role") == "user"), {})
    return hashlib.sha256(_text_of(first_user.get("content")).encode()).hexdigest()


def _input_size(body: dict[str, Any]) -> tuple[int, str]:
    """(input tokens, the cached system prefix)."""
    system_text, cached_text = _system_parts(body.get("system"))
    all_text = system_text + "".join(_text_of(m.get("content")) for m in body["messages"])
    return max(1, _tokens(all_text)), cached_text


def _invalid_params(body: Any, *, legacy_api: bool) -> str | None:
    """Why the API refuses these message params (an invalid_request_error), or None."""
    if not isinstance(body, dict):
        return "body: Input should be an object"
    sampling = sorted(SAMPLING_PARAMETERS & body.keys())
    if sampling and not legacy_api:
        return f"{sampling[0]}: Extra inputs are not permitted"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not body.get("model") or not body.get("max_tokens"):
        return "model, max_tokens and messages are required"
    return None


def script_behaviours(state: Any, payload: Any, model: type[Behaviour]) -> JSONResponse:
    """``POST /_fake/script`` (this fake's and the OpenAI fake's): queue the behaviours, say how many."""
    try:
        behaviours = [model.model_validate(b) for b in payload.get("behaviours", [])]
    except ValidationError as exc:
        return JSONResponse({"error": exc.errors(include_url=False)}, 422)
    state.script.extend(behaviours)
    return JSONResponse({"queued": sum(b.times for b in state.script)})


def reconfigure(state: Any, payload: Any, model: type[FakeConfig]) -> JSONResponse:
    """``POST /_fake/config`` (both fakes): the given settings over the current ones."""
    try:
        state.config = model.model_validate({**state.config.model_dump(), **payload})
    except ValidationError as exc:
        return JSONResponse({"error": exc.errors(include_url=False)}, 422)
    state.reconfigured()
    return JSONResponse(state.config.model_dump())


async def wait_as_drawn(
    behaviour: Any, config: Any, request: Request, call: dict[str, Any], headers: dict[str, str]
) -> Response | None:
    """The drawn behaviour's latency (else the configured one), then, for a ``hang``, its hang until the
    client gives up: that call is recorded as 499 and its answer returned. None: answer as drawn."""
    latency = behaviour.latency if behaviour.latency is not None else config.latency
    if latency:
        await asyncio.sleep(latency)
    if behaviour.kind == "hang":
        deadline = time.monotonic() + behaviour.hang_seconds
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                call["status"] = 499  # the client gave up first, as it should
                return Response(status_code=499, headers=headers)
            await asyncio.sleep(0.05)
    return None
