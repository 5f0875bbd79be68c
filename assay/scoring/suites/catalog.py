"""The model catalog of ``config/models.yaml``: the judge providers, the models each serves, what a
model costs and which request parameters it takes. Operational (never hashed), but a suite's judges
are checked against it when the suite is resolved (``assay.scoring.suites.loader``)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assay.scoring.errors import CriteriaError
from assay.scoring.suites.providers import (
    ParameterName,
    ProviderConfig,
    check_batch_lane,
    check_parameters,
    check_reasoning_parameters,
)


class _JudgedCriteria(Protocol):
    """What the batch-lane check reads of ``loader.Criteria`` (which imports this module)."""

    @property
    def judge_calls(self) -> list[str]: ...

    def judge_for(self, component: str) -> Any: ...


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str
    input_per_mtok: float = Field(..., ge=0)
    output_per_mtok: float = Field(..., ge=0)
    cache_write_per_mtok: float = Field(..., ge=0)
    cache_read_per_mtok: float = Field(..., ge=0)
    batch_discount: float = Field(0.5, gt=0, le=1)
    context_window: int = Field(..., gt=0)
    min_cacheable_tokens: int = Field(..., ge=0)
    # Operational limits for the shared rate governor (your account's tier), not prices.
    requests_per_minute: int = Field(50, ge=1)
    input_tokens_per_minute: int = Field(30_000, ge=1)
    output_tokens_per_minute: int | None = Field(None, ge=1)  # None: as the provider's headers say
    # A reasoning model thinks before it answers: its reasoning tokens are output tokens (billed, and
    # counted against limits), and it alone takes reasoning_effort and max_completion_tokens.
    reasoning: bool = False
    # The request parameters the model takes (reasoning models take reasoning_effort, not temperature).
    parameters: list[ParameterName] = Field(default_factory=list)

    _reasoning_only = model_validator(mode="after")(check_reasoning_parameters)


class ModelCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    providers: dict[str, ProviderConfig]
    models: dict[str, ModelPrice]

    @model_validator(mode="after")
    def _models_have_providers(self) -> ModelCatalog:
        orphans = sorted(name for name, m in self.models.items() if m.provider not in self.providers)
        if orphans:
            raise ValueError(f"models {orphans} name a provider that providers: does not configure")
        return self

    def provider(self, name: str) -> ProviderConfig:
        if name not in self.providers:
            raise CriteriaError(f"unknown judge provider {name!r}; known: {', '.join(sorted(self.providers))}")
        return self.providers[name]

    def resolve(self, provider: str, model: str) -> str:
        """An empty model means the provider's default; the result is a concrete, known, current name."""
        config = self.provider(provider)
        name = model.strip() or config.default_model
        deprecated = _deprecated_models(config)
        if name in deprecated:
            raise CriteriaError(f"judge model {name!r} is deprecated (end of life {deprecated[name]}); pick a current one")
        known = self.models.get(name)
        if known is not None and known.provider != provider:
            raise CriteriaError(f"judge model {name!r} is served by provider {known.provider!r}, not {provider!r}")
        if known is None and not config.any_model:
            served = sorted(n for n, m in self.models.items() if m.provider == provider)
            raise CriteriaError(
                f"judge model {name!r} has no price in config/models.yaml; known for {provider}: {', '.join(served)}"
            )
        return name

    def price(self, provider: str, model: str) -> ModelPrice:
        """What ``model`` costs and may do: its entry in ``models:``, or, on a provider that serves any
        model (a local server), nothing at the provider's limits."""
        known = self.models.get(model)
        if known is not None and known.provider == provider:
            return known
        config = self.provider(provider)
        if not config.any_model:
            raise CriteriaError(f"judge model {model!r} of provider {provider!r} is not in config/models.yaml")
        return ModelPrice(
            provider=provider,
            input_per_mtok=0,
            output_per_mtok=0,
            cache_write_per_mtok=0,
            cache_read_per_mtok=0,
            context_window=config.context_window,
            min_cacheable_tokens=0,
            requests_per_minute=config.requests_per_minute,
            input_tokens_per_minute=config.input_tokens_per_minute,
            reasoning=config.reasoning,
            parameters=list(config.parameters),
        )

    def check_parameters(self, provider: str, model: str, given: dict[str, Any]) -> None:
        accepted = list(self.price(provider, model).parameters)
        check_parameters(provider, self.provider(provider), model, accepted, given)

    def check_batch_lane(self, criteria: _JudgedCriteria) -> None:
        """Refuse the batch lane (a suite's default, or a run asked for on it) for criteria with a
        judge whose provider has no batch API."""
        judges = {name: criteria.judge_for(name).provider for name in criteria.judge_calls}
        check_batch_lane(judges, self.provider)


def _deprecated_models(config: ProviderConfig) -> dict[str, Any]:
    """The provider's retired models and their dates: the installed Anthropic SDK's list for the
    anthropic type (its source of truth), and the list shipped in models.yaml for every provider."""
    deprecated: dict[str, Any] = dict(config.deprecated)
    if config.type == "anthropic":
        deprecated.update(anthropic_deprecated_models())
    return deprecated


_ANTHROPIC_LIST_MODULE = "anthropic.resources.messages.messages"


@lru_cache(maxsize=1)
def anthropic_deprecated_models() -> dict[str, str]:
    """The installed Anthropic SDK's ``DEPRECATED_MODELS``. Read from the module's source when the SDK
    is not imported yet: importing it costs about a second of CPU, which every API start and every
    embedded run without a judge would pay only to resolve model names (a literal in every SDK
    release so far; the import is the fallback if that ever changes)."""
    module = sys.modules.get(_ANTHROPIC_LIST_MODULE)
    if module is None:
        spec = importlib.util.find_spec("anthropic")  # finds the package without importing it
        source = Path(spec.origin).parent / "resources" / "messages" / "messages.py" if spec and spec.origin else None
        try:
            tree = ast.parse(source.read_text()) if source else None
        except (OSError, SyntaxError):
            tree = None
        for node in tree.body if tree else ():
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DEPRECATED_MODELS" for t in node.targets):
                try:
                    return dict(ast.literal_eval(node.value))
                except ValueError:
                    break
        module = importlib.import_module(_ANTHROPIC_LIST_MODULE)
    return dict(module.DEPRECATED_MODELS)


@lru_cache(maxsize=8)
def _load_catalog(path: Path, mtime: float) -> ModelCatalog:
    try:
        return ModelCatalog.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise CriteriaError(f"cannot load model catalog {path}: {exc}") from exc


def load_model_catalog(config_dir: Path) -> ModelCatalog:
    path = config_dir / "models.yaml"
    if not path.is_file():
        raise CriteriaError(f"model catalog {path} not found")
    return _load_catalog(path, path.stat().st_mtime)
