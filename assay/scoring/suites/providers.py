"""The judge providers of ``config/models.yaml``: what each one is, which models it may judge with, and
which request parameters a suite may set for them.

A provider is an API the judge reaches through its SDK (``assay.scoring.judge.providers``): the
Anthropic Messages API, or any OpenAI-compatible Chat Completions endpoint (the OpenAI API, vLLM,
Ollama, ...). Its name and a model are criteria; its URL, key and limits are operational (never hashed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from assay.scoring.errors import CriteriaError

ProviderType = Literal["anthropic", "openai_compatible"]
StructuredOutput = Literal["json_schema", "json_object", "prompt"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]

# The request parameters a suite may set on a judge, beside max_tokens. Each is a criterion (it
# changes the answers) and is refused at validation for a model that does not take it.
JUDGE_PARAMETERS = ("temperature", "seed", "reasoning_effort", "max_completion_tokens")
ParameterName = Literal["temperature", "seed", "reasoning_effort", "max_completion_tokens"]
# What only reasoning models take (``reasoning: true`` in models.yaml): how hard to think, and the room
# for the reasoning and the answer together.
REASONING_PARAMETERS = frozenset({"reasoning_effort", "max_completion_tokens"})
# Parameters no provider is sent: suites that name them are refused outright.
REFUSED_PARAMETERS = frozenset({"top_p", "top_k"})


class ProviderConfig(BaseModel):
    """One entry of ``providers:`` in ``config/models.yaml`` (operational: nothing here is hashed)."""

    model_config = ConfigDict(extra="forbid")

    type: ProviderType = "anthropic"
    default_model: str
    # None: the SDK's own default (ANTHROPIC_BASE_URL / OPENAI_BASE_URL, else the public API).
    base_url: str | None = None
    # The environment variable holding the key. None: the Anthropic key from Assay's settings for the
    # anthropic type, the SDK's own OPENAI_API_KEY for the openai type, or no key (a local server).
    api_key_env: str | None = None
    key_required: bool = True  # False: a local server that takes any key (one is still sent: the SDK wants one)
    # How an OpenAI-compatible server is asked for JSON: strict json_schema, json_object, or plain text
    # with the schema in the prompt. Anthropic always uses its own structured outputs.
    structured_output: StructuredOutput = "json_schema"
    # The name of the answer-length parameter: OpenAI's is max_completion_tokens; older servers take max_tokens.
    max_tokens_parameter: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    batch: bool | None = None  # has a batch API the batch lane can use; None: the type's default
    # Calls in flight to this provider across the whole fleet (a local server's real limit); None: no cap.
    max_in_flight: int | None = Field(None, ge=1)
    # A local server may serve any model: names not in ``models:`` are accepted, priced zero.
    any_model: bool = False
    # What a model this provider serves accepts when ``models:`` does not say (any_model servers), and
    # whether those models reason (then they may take reasoning_effort and max_completion_tokens).
    parameters: list[ParameterName] = Field(default_factory=list)
    reasoning: bool = False
    # Models the provider retired or will retire, with the date: refused like the Anthropic SDK's list.
    deprecated: dict[str, dt.date] = Field(default_factory=dict)
    # Operational limits for models not in ``models:`` (any_model servers).
    requests_per_minute: int = Field(1_000_000, ge=1)
    input_tokens_per_minute: int = Field(1_000_000_000, ge=1)
    context_window: int = Field(32_768, gt=0)

    @property
    def has_batch_api(self) -> bool:
        if self.batch is not None:
            return self.batch
        return self.type == "anthropic"


def check_parameters(
    provider: str, config: ProviderConfig, model: str, accepted: list[str], given: dict[str, object]
) -> None:
    """Refuse request parameters ``model`` does not take (the provider would answer 400 on every call)."""
    refused = sorted(name for name in given if name not in accepted)
    if not refused:
        return
    if config.type == "anthropic":
        raise CriteriaError(
            f"{', '.join(refused)}: the Anthropic API version of the installed SDK (2026-10-21) takes no "
            "sampling parameters and rejects them; remove the key"
        )
    takes = ", ".join(accepted) if accepted else "none"
    why = (
        "; reasoning_effort and max_completion_tokens are for reasoning models"
        if REASONING_PARAMETERS & set(refused)
        else ""
    )
    raise CriteriaError(
        f"{', '.join(refused)}: model {model!r} of provider {provider!r} does not take "
        f"{'this parameter' if len(refused) == 1 else 'these parameters'} (it takes: {takes}){why}; remove the key"
    )


def check_reasoning_parameters(model: Any) -> Any:
    """A model in ``models:`` lists reasoning parameters only if it is a reasoning model."""
    misplaced = sorted(REASONING_PARAMETERS & set(model.parameters)) if not model.reasoning else []
    if misplaced:
        raise ValueError(f"parameters {misplaced} are for reasoning models only: set reasoning: true or remove them")
    return model


def check_batch_lane(judges: Mapping[str, str], provider: Callable[[str], ProviderConfig]) -> None:
    """Refuse the batch lane when a judge component's provider (``judges``: component -> provider)
    has no batch API."""
    for component, name in judges.items():
        if not provider(name).has_batch_api:
            raise CriteriaError(
                f"judge provider {name!r} (component {component!r}) has no batch API (batch: false in "
                "config/models.yaml); use lane: realtime"
            )


def completion_limit(max_tokens: int, parameters: Mapping[str, Any]) -> int:
    """The most output tokens one call may spend: a reasoning model's ``max_completion_tokens`` (its
    reasoning and its answer together) when the suite sets it, else ``max_tokens``. What a call is
    admitted for against a token limit and budgeted at."""
    return int(parameters.get("max_completion_tokens") or max_tokens)


def check_completion_limit(max_tokens: int, parameters: Mapping[str, Any]) -> None:
    limit = parameters.get("max_completion_tokens")
    if limit is not None and limit < max_tokens:
        raise CriteriaError(
            f"max_completion_tokens ({limit}) is the room for the reasoning and the answer together: it "
            f"cannot be below max_tokens ({max_tokens}); raise it or leave it out"
        )


def without_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``data`` without those of ``keys`` whose value is None: optional fields added after criteria
    were first hashed must not appear in the dump of criteria that do not use them."""
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


class JudgeParameters(BaseModel):
    """A judge's request parameters, where its model takes them (criteria: they change the answers).
    Unset ones stay out of the dump, so criteria written before they existed hash as they always did."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0, le=2)
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    max_completion_tokens: int | None = Field(None, gt=0, le=200_000)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return without_none(handler(self), JUDGE_PARAMETERS)

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters set, as the provider is sent them."""
        return {name: getattr(self, name) for name in JUDGE_PARAMETERS if getattr(self, name) is not None}
