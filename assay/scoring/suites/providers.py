"""The judge providers of ``config/models.yaml``: what each one is, which models it may judge with, and
which request parameters a suite may set for them.

A provider is an API the judge reaches through its SDK (``assay.scoring.judge.providers``): the
Anthropic Messages API, or any OpenAI-compatible Chat Completions endpoint (the OpenAI API, vLLM,
Ollama, ...). Its name and a model are criteria; its URL, key and limits are operational (never hashed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from assay.scoring.errors import CriteriaError

ProviderType = Literal["anthropic", "openai_compatible"]
StructuredOutput = Literal["json_schema", "json_object", "prompt"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]

# The request parameters a suite may set on a judge, beside max_tokens. Each is a criterion (it
# changes the answers) and is refused at validation for a model that does not take it.
JUDGE_PARAMETERS = ("temperature", "seed", "reasoning_effort")
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
    # What a model this provider serves accepts when ``models:`` does not say (any_model servers).
    parameters: list[Literal["temperature", "seed", "reasoning_effort"]] = Field(default_factory=list)
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
    raise CriteriaError(
        f"{', '.join(refused)}: model {model!r} of provider {provider!r} does not take "
        f"{'this parameter' if len(refused) == 1 else 'these parameters'} (it takes: {takes}); remove the key"
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

    @model_serializer(mode="wrap")
    def _dump(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return without_none(handler(self), JUDGE_PARAMETERS)

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters set, as the provider is sent them."""
        return {name: getattr(self, name) for name in JUDGE_PARAMETERS if getattr(self, name) is not None}
