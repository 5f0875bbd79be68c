"""Suites: YAML files in ``config/suites/`` resolved into hashed *criteria*.

Criteria are what decides a score: prompt text, verdict schema, weights, metric arguments and
versions, judge model, max tokens, threshold. (The installed anthropic SDK speaks an API version with
no sampling parameters, so there is no temperature to configure or hash; see README.) Operational settings (enabled flags,
timeouts, concurrency, keys, URLs) live beside them in the file but stay out of the hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from assay.scoring.envsubst import substitute_tree
from assay.scoring.errors import CriteriaError, NotFound
from assay.scoring.kinds import get_kind
from assay.scoring.metrics.registry import registered_metrics

CRITERIA_SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ComponentSpec(_Strict):
    """One component: a registered metric, or the judge (``judge: true``)."""

    weight: float = Field(..., gt=0, le=1)
    metric: str | None = None
    version: int | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    judge: bool = False

    @model_validator(mode="after")
    def _metric_or_judge(self) -> ComponentSpec:
        if self.judge == (self.metric is not None):
            raise ValueError("a component names either a metric (with its version) or judge: true")
        if self.metric is not None and self.version is None:
            raise ValueError(f"metric {self.metric!r} needs a version")
        return self


class JudgeCriteria(_Strict):
    provider: Literal["anthropic"] = "anthropic"
    model: str
    max_tokens: int = Field(..., gt=0, le=64_000)
    prompt: str = Field(..., min_length=1)
    verdict: str
    verdict_schema: dict[str, Any]


class Criteria(_Strict):
    """The hashed part of a suite. Workers rebuild scoring from this alone."""

    schema_version: int = CRITERIA_SCHEMA_VERSION
    kind: str
    threshold: float = Field(..., ge=0, le=1)
    components: dict[str, ComponentSpec]
    judge: JudgeCriteria | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Criteria:
        if not self.components:
            raise ValueError("a suite needs at least one component")
        total = sum(c.weight for c in self.components.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"component weights must add up to 1, they add up to {total:g}")
        judged = [n for n, c in self.components.items() if c.judge]
        if len(judged) > 1:
            raise ValueError(f"at most one judge component, found {judged}")
        if judged and self.judge is None:
            raise ValueError(f"component {judged[0]!r} is judged but the suite has no judge section")
        return self

    @property
    def judge_component(self) -> str | None:
        return next((n for n, c in self.components.items() if c.judge), None)

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))

    @property
    def criteria_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()


class JudgeOptions(_Strict):
    timeout_seconds: float = Field(60.0, gt=0)


class RescoreOptions(_Strict):
    """How the nightly re-scoring treats the suite."""

    nightly: bool = True  # false: only manual runs (assay rescore) re-score it
    # `batch`: the judge calls of scheduled runs go through the Message Batches API (half price).
    lane: Literal["realtime", "batch"] = "realtime"
    budget_usd: float | None = Field(None, gt=0)  # per nightly run; judge calls stop when it is spent


class SuiteOptions(_Strict):
    """Operational settings: not criteria, not hashed."""

    enabled: bool = True
    judge: JudgeOptions = Field(default_factory=JudgeOptions)
    rescore: RescoreOptions = Field(default_factory=RescoreOptions)
    description: str = ""


class Suite(BaseModel):
    name: str
    criteria: Criteria
    options: SuiteOptions
    source: str

    @property
    def criteria_hash(self) -> str:
        return self.criteria.criteria_hash


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the byte string the criteria hash is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --- models and prices -------------------------------------------------------------------------


class ModelPrice(_Strict):
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


class ProviderConfig(_Strict):
    default_model: str


class ModelCatalog(_Strict):
    providers: dict[str, ProviderConfig]
    models: dict[str, ModelPrice]

    def resolve(self, provider: str, model: str) -> str:
        """An empty model means the provider's default; the result is a concrete, known, current name."""
        if provider not in self.providers:
            raise CriteriaError(f"unknown judge provider {provider!r}; known: {', '.join(sorted(self.providers))}")
        name = model.strip() or self.providers[provider].default_model
        if name in _deprecated_models():
            raise CriteriaError(
                f"judge model {name!r} is deprecated (end of life {_deprecated_models()[name]}); pick a current one"
            )
        if name not in self.models:
            raise CriteriaError(
                f"judge model {name!r} has no price in config/models.yaml; known: {', '.join(sorted(self.models))}"
            )
        return name


def _deprecated_models() -> dict[str, str]:
    from anthropic.resources.messages.messages import DEPRECATED_MODELS

    return DEPRECATED_MODELS


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


# --- loading suite files -------------------------------------------------------------------------


class _JudgeFile(_Strict):
    provider: str = "anthropic"
    model: str = ""
    max_tokens: int
    verdict: str
    prompt: str | None = None
    prompt_file: str | None = None
    timeout_seconds: float = 60.0

    @field_validator("model", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return "" if v is None else v

    @model_validator(mode="before")
    @classmethod
    def _no_sampling(cls, data: Any) -> Any:
        sampling = sorted({"temperature", "top_p", "top_k"} & set(data)) if isinstance(data, dict) else []
        if sampling:
            raise ValueError(
                f"{', '.join(sampling)}: the Anthropic API version of the installed SDK (2026-10-21) takes no "
                "sampling parameters and rejects them; remove the key"
            )
        return data


class _SuiteFile(_Strict):
    name: str
    kind: str
    description: str = ""
    enabled: bool = True
    threshold: float
    components: dict[str, ComponentSpec]
    judge: _JudgeFile | None = None
    rescore: RescoreOptions = Field(default_factory=RescoreOptions)


def suite_path(config_dir: Path, name: str) -> Path:
    return config_dir / "suites" / f"{name}.yaml"


def list_suite_names(config_dir: Path) -> list[str]:
    return sorted(p.stem for p in (config_dir / "suites").glob("*.yaml"))


def load_suite(config_dir: Path, name: str, env: Mapping[str, str] | None = None) -> Suite:
    path = suite_path(config_dir, name)
    if not name.replace("_", "").replace("-", "").isalnum() or not path.is_file():
        raise NotFound(f"no suite named {name!r}; available: {', '.join(list_suite_names(config_dir)) or 'none'}")
    return parse_suite(path.read_text(), config_dir=config_dir, env=os.environ if env is None else env, source=str(path))


def parse_suite(text: str, *, config_dir: Path, env: Mapping[str, str], source: str = "<string>") -> Suite:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CriteriaError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise CriteriaError(f"{source}: a suite file is a YAML mapping")
    resolved = substitute_tree(raw, env, where=Path(source).name)
    try:
        spec = _SuiteFile.model_validate(resolved)
    except ValidationError as exc:
        raise CriteriaError(f"{source}: {_first_errors(exc)}") from exc

    kind = get_kind(spec.kind)
    _check_metrics(spec, source)
    judge = None
    options_judge = JudgeOptions()
    if spec.judge is not None:
        judge = _resolve_judge(spec.judge, config_dir, source)
        options_judge = JudgeOptions(timeout_seconds=spec.judge.timeout_seconds)
    try:
        criteria = Criteria(
            kind=kind.name, threshold=spec.threshold, components=spec.components, judge=judge
        )
    except ValidationError as exc:
        raise CriteriaError(f"{source}: {_first_errors(exc)}") from exc
    options = SuiteOptions(
        enabled=spec.enabled, judge=options_judge, description=spec.description, rescore=spec.rescore
    )
    return Suite(name=spec.name, criteria=criteria, options=options, source=source)


def _resolve_judge(spec: _JudgeFile, config_dir: Path, source: str) -> JudgeCriteria:
    from assay.scoring.judge.verdicts import verdict_model

    if (spec.prompt is None) == (spec.prompt_file is None):
        raise CriteriaError(f"{source}: the judge needs exactly one of prompt or prompt_file")
    if spec.prompt_file is not None:
        prompt_path = (config_dir / spec.prompt_file).resolve()
        if not prompt_path.is_relative_to(config_dir.resolve()) or not prompt_path.is_file():
            raise CriteriaError(f"{source}: prompt_file {spec.prompt_file!r} is not a file inside {config_dir}")
        prompt = prompt_path.read_text()
    else:
        prompt = spec.prompt or ""
    model = load_model_catalog(config_dir).resolve(spec.provider, spec.model)
    verdict = verdict_model(spec.verdict)
    return JudgeCriteria(
        provider=spec.provider,  # type: ignore[arg-type]
        model=model,
        max_tokens=spec.max_tokens,
        prompt=prompt,
        verdict=spec.verdict,
        verdict_schema=verdict.model_json_schema(),
    )


def _check_metrics(spec: _SuiteFile, source: str) -> None:
    known = registered_metrics()
    for name, comp in spec.components.items():
        if comp.metric is None:
            continue
        if comp.metric not in known:
            raise CriteriaError(f"{source}: component {name!r} names unknown metric {comp.metric!r}")
        version, kinds = known[comp.metric].version, known[comp.metric].kinds
        if comp.version != version:
            raise CriteriaError(
                f"{source}: component {name!r} asks for {comp.metric} version {comp.version}, this code has {version}"
            )
        if spec.kind not in kinds:
            raise CriteriaError(f"{source}: metric {comp.metric!r} does not score {spec.kind!r} items")


def _first_errors(exc: ValidationError, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "suite"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
