"""Judge rubrics written in a suite: verdict types and cache-first prompt templates.

A rubric judge component names a verdict type (``verdict.type``):

- ``score``: a number from 0 to 1, the component score as is;
- ``scale``: an integer from ``min`` to ``max`` (both required, 0 <= min < max <= 100), scored
  ``(v - min) / (max - min)``;
- ``pass_fail``: ``passed`` true or false, scored 1 or 0;
- ``labels``: the judge picks one of the named labels (at least two), scored the label's value (0..1);
- ``criteria``: named criteria, each with a weight, a description and evaluation steps, each scored
  on ``scale`` (default 1..5) with its own reasoning and normalised like ``scale``; the component
  score is the weighted mean. As with component weights, criteria weights must add up to 1.

The verdict model is built from the spec (one class per distinct spec in a process). Its field
descriptions tell the judge the allowed range (they reach the judge through ``{{OUTPUT_SCHEMA}}``)
and its constraints reject an answer out of range, which the judge service then asks once to repair:
an answer is never clamped. Every verdict has a ``reasoning``, kept in the details with the raw answer.

``compose_template`` lays the judge prompt out cache-first: the rubric, the criteria with their steps,
how to answer and ``{{OUTPUT_SCHEMA}}`` come first, then the per-item template, so everything fixed
lands in the cached system prompt (``render_prompt`` splits at the first per-item placeholder).
The per-item template is the component's ``prompt`` when given, else ``DEFAULT_ITEM_TEMPLATE``, which
shows only ``{{input}}`` and ``{{output}}``: every item has those. A rubric that needs the reference
answer or the retrieved context says so in its ``prompt``, e.g.::

    prompt: |
      ### Question
      {{input}}

      ### Reference answer
      {{expected}}

      ### Answer to grade
      {{output}}

An item without a value the prompt names fails that component with the reason, never silently.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.prompt import OUTPUT_SCHEMA, PLACEHOLDER
from assay.scoring.judge.verdicts import VerdictType

# Labels and criterion names become JSON keys and enum values the judge must reproduce exactly.
NAME_RULE = "a letter, then up to 63 letters, digits, '_' or '-'"
_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
SCALE_BOUNDS = (0, 100)
DEFAULT_CRITERIA_SCALE = (1, 5)

DEFAULT_ITEM_TEMPLATE = "### Input\n{{input}}\n\n### Output\n{{output}}\n"

_REASONING = "Why this verdict: the evidence in the item that decides it, written before the verdict itself."


def _check_name(value: str, what: str) -> str:
    if not re.fullmatch(_NAME_PATTERN, value):
        raise PydanticCustomError("name", "{what} {value} must be " + NAME_RULE, {"what": what, "value": repr(value)})
    return value


def _scale_bound(value: int) -> int:
    low, high = SCALE_BOUNDS
    if not low <= value <= high:
        raise PydanticCustomError("scale_bound", "must be between {low} and {high}", {"low": low, "high": high})
    return value


def _greater_than_min(value: int, info: ValidationInfo) -> int:
    low = info.data.get("min")
    if low is not None and value <= low:
        raise PydanticCustomError("scale_order", "must be greater than min ({min})", {"min": low})
    return value


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CriterionSpec(_Spec):
    """One named criterion of a ``criteria`` verdict."""

    name: str
    weight: float = Field(..., gt=0, le=1)
    description: str = ""
    steps: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "criterion name")

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[str]) -> list[str]:
        for number, step in enumerate(value, 1):
            if not step.strip():
                raise PydanticCustomError("empty_step", "step {number} is empty", {"number": number})
        return value


class ScaleSpec(_Spec):
    """An integer scale, lowest (worst) to highest (best)."""

    min: int
    max: int

    @field_validator("min", "max")
    @classmethod
    def _bounds(cls, value: int) -> int:
        return _scale_bound(value)

    @field_validator("max")
    @classmethod
    def _order(cls, value: int, info: ValidationInfo) -> int:
        return _greater_than_min(value, info)


VerdictKind = Literal["score", "scale", "pass_fail", "labels", "criteria"]
# Which verdict type each optional field belongs to.
_OWNER: dict[str, str] = {"min": "scale", "max": "scale", "labels": "labels", "criteria": "criteria", "scale": "criteria"}


class VerdictSpec(_Spec):
    """A rubric judge's ``verdict``: its type and that type's settings (and no other type's).

    Its dump leaves unset fields out, so a spec hashes the same however the criteria around it dump."""

    type: VerdictKind
    min: int | None = Field(None, validate_default=True)
    max: int | None = Field(None, validate_default=True)
    labels: dict[str, float] | None = Field(None, validate_default=True)
    criteria: list[CriterionSpec] | None = Field(None, validate_default=True)
    scale: ScaleSpec | None = Field(None, validate_default=True)

    @field_validator("min", "max", "labels", "criteria", "scale")
    @classmethod
    def _belongs_to_type(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is None:  # the type itself is invalid, and its own error says so
            return value
        field = info.field_name
        owner = _OWNER[field]
        if value is not None and kind != owner:
            hint = " (a criteria verdict sets its range with scale: {min, max})" if owner == "scale" and kind == "criteria" else ""
            raise PydanticCustomError(
                "verdict_field", "only a {owner} verdict has {field}, this one is {kind}{hint}",
                {"owner": owner, "field": field, "kind": kind, "hint": hint},
            )
        if value is None and kind == owner:
            if field == "scale":
                return ScaleSpec(min=DEFAULT_CRITERIA_SCALE[0], max=DEFAULT_CRITERIA_SCALE[1])
            raise PydanticCustomError("verdict_field", "a {owner} verdict needs {field}", {"owner": owner, "field": field})
        return value

    @field_validator("min", "max")
    @classmethod
    def _scale_bounds(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return None
        _scale_bound(value)
        return _greater_than_min(value, info) if info.field_name == "max" else value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if len(value) < 2:
            raise PydanticCustomError("labels", "give at least two labels, each with its score from 0 to 1")
        for name, score in value.items():
            _check_name(name, "label")
            if not (math.isfinite(score) and 0 <= score <= 1):
                raise PydanticCustomError(
                    "labels", "label {name} scores {score}, a label's score is from 0 to 1", {"name": repr(name), "score": score}
                )
        return value

    @field_validator("criteria")
    @classmethod
    def _criteria(cls, value: list[CriterionSpec] | None) -> list[CriterionSpec] | None:
        if value is None:
            return None
        if not value:
            raise PydanticCustomError("criteria", "give at least one criterion")
        names = [c.name for c in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PydanticCustomError("criteria", "criterion names must be unique; repeated: {names}", {"names": ", ".join(duplicates)})
        total = math.fsum(c.weight for c in value)
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise PydanticCustomError(
                "criteria", "criteria weights must add up to 1, they add up to {total}", {"total": f"{total:g}"}
            )
        return value

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}

    def cache_key(self) -> str:
        # Not sorted: the order of labels and criteria is the order the judge sees them in.
        return self.model_dump_json()


# ---------------------------------------------------------------------------------------------------
# Verdict models

_STRICT = ConfigDict(extra="forbid")


def _reasoning_field() -> Any:
    return (str, Field(..., description=_REASONING))


def _scale_field(low: int, high: int, what: str) -> Any:
    return (int, Field(..., ge=low, le=high, description=f"{what}: an integer from {low} (worst) to {high} (best)."))


def _normalised(value: int, low: int, high: int) -> float:
    return (value - low) / (high - low)


def _score_verdict(spec: VerdictSpec) -> VerdictType:
    model = create_model(
        "ScoreVerdict",
        __config__=_STRICT,
        reasoning=_reasoning_field(),
        score=(float, Field(..., ge=0, le=1, description="How well the output meets the rubric: a number from 0 (not at all) to 1 (fully).")),
    )

    def score(verdict: Any) -> tuple[float, dict[str, Any]]:
        return verdict.score, {"reasoning": verdict.reasoning, "score": verdict.score}

    return VerdictType(model=model, score=score)


def _scale_verdict(spec: VerdictSpec) -> VerdictType:
    low, high = spec.min, spec.max
    assert low is not None and high is not None  # VerdictSpec requires both for a scale
    model = create_model("ScaleVerdict", __config__=_STRICT, reasoning=_reasoning_field(), score=_scale_field(low, high, "The grade"))

    def score(verdict: Any) -> tuple[float, dict[str, Any]]:
        return _normalised(verdict.score, low, high), {"reasoning": verdict.reasoning, "scale": verdict.score, "min": low, "max": high}

    return VerdictType(model=model, score=score)


def _pass_fail_verdict(spec: VerdictSpec) -> VerdictType:
    model = create_model(
        "PassFailVerdict",
        __config__=_STRICT,
        reasoning=_reasoning_field(),
        passed=(bool, Field(..., description="true if the output meets the rubric, false if it does not.")),
    )

    def score(verdict: Any) -> tuple[float, dict[str, Any]]:
        return (1.0 if verdict.passed else 0.0), {"reasoning": verdict.reasoning, "passed": verdict.passed}

    return VerdictType(model=model, score=score)


def _labels_verdict(spec: VerdictSpec) -> VerdictType:
    labels = dict(spec.labels or {})
    names = tuple(labels)
    model = create_model(
        "LabelVerdict",
        __config__=_STRICT,
        reasoning=_reasoning_field(),
        label=(Literal[names], Field(..., description=f"Exactly one of: {', '.join(names)}.")),  # type: ignore[valid-type]
    )

    def score(verdict: Any) -> tuple[float, dict[str, Any]]:
        return float(labels[verdict.label]), {"reasoning": verdict.reasoning, "label": verdict.label}

    return VerdictType(model=model, score=score)


def _criteria_verdict(spec: VerdictSpec) -> VerdictType:
    criteria = list(spec.criteria or [])
    assert spec.scale is not None  # VerdictSpec fills the default scale
    low, high = spec.scale.min, spec.scale.max
    criterion_model = create_model(
        "CriterionScore",
        __config__=_STRICT,
        reasoning=(str, Field(..., description="What this criterion's evaluation steps found in the item.")),
        score=_scale_field(low, high, "This criterion's grade"),
    )
    # Field names are positional and the criterion names aliases: a criterion may be called anything
    # the name rule allows (``schema``, ``copy``) without shadowing a pydantic attribute.
    scores_model = create_model(
        "CriteriaScores",
        __config__=ConfigDict(extra="forbid", serialize_by_alias=True),
        **{f"c{i}": (criterion_model, Field(..., alias=c.name)) for i, c in enumerate(criteria)},  # type: ignore[call-overload]
    )
    model = create_model(
        "CriteriaVerdict",
        __config__=_STRICT,
        criteria=(scores_model, Field(..., description="One entry per criterion, each scored on its own.")),
        reasoning=(str, Field(..., description="A short overall summary of the verdict across the criteria.")),
    )

    def score(verdict: Any) -> tuple[float, dict[str, Any]]:
        per_criterion: dict[str, dict[str, Any]] = {}
        weighted = []
        for i, criterion in enumerate(criteria):
            answer = getattr(verdict.criteria, f"c{i}")
            normalised = _normalised(answer.score, low, high)
            weighted.append(criterion.weight * normalised)
            per_criterion[criterion.name] = {
                "score": answer.score, "normalised": normalised, "weight": criterion.weight, "reasoning": answer.reasoning,
            }
        # Dividing by the weights' own sum keeps a perfect answer at exactly 1 whatever their rounding.
        total = math.fsum(weighted) / math.fsum(c.weight for c in criteria)
        return total, {"reasoning": verdict.reasoning, "criteria": per_criterion, "min": low, "max": high}

    return VerdictType(model=model, score=score)


_BUILDERS: dict[str, Callable[[VerdictSpec], VerdictType]] = {
    "score": _score_verdict,
    "scale": _scale_verdict,
    "pass_fail": _pass_fail_verdict,
    "labels": _labels_verdict,
    "criteria": _criteria_verdict,
}


def rubric_verdict(spec: VerdictSpec) -> VerdictType:
    """The verdict model and scoring for ``spec``; the same object for an equal spec, so what is
    cached per verdict model (its schema, the structured-output request) is built once."""
    return _rubric_verdict(spec.cache_key())


@functools.lru_cache(maxsize=256)
def _rubric_verdict(key: str) -> VerdictType:
    spec = VerdictSpec.model_validate_json(key)
    return _BUILDERS[spec.type](spec)


# ---------------------------------------------------------------------------------------------------
# Templates


def _tag(name: str) -> str:
    return "{{" + name + "}}"


def _how_to_answer(verdict: VerdictSpec) -> str:
    if verdict.type == "score":
        return "Give `score`, a number from 0 (the output does not meet the rubric at all) to 1 (it fully does)."
    if verdict.type == "scale":
        return f"Give `score`, an integer from {verdict.min} (worst) to {verdict.max} (best)."
    if verdict.type == "pass_fail":
        return "Give `passed`: true if the output meets the rubric, false if it does not."
    if verdict.type == "labels":
        return f"Give `label`, exactly one of: {', '.join(verdict.labels or {})}."
    return (
        "Under `criteria`, give each criterion its `reasoning` (what its evaluation steps found) and its "
        "`score`; then give an overall `reasoning`."
    )


def _criteria_section(verdict: VerdictSpec) -> str:
    assert verdict.criteria is not None and verdict.scale is not None
    lines = [
        "## Criteria",
        "Score each criterion on its own, following its evaluation steps in order, as an integer from "
        f"{verdict.scale.min} (worst) to {verdict.scale.max} (best).",
    ]
    for criterion in verdict.criteria:
        lines += ["", f"### {criterion.name}"]
        if criterion.description.strip():
            lines.append(criterion.description.strip())
        if criterion.steps:
            lines.append("Evaluation steps:")
            lines += [f"{number}. {step.strip()}" for number, step in enumerate(criterion.steps, 1)]
    return "\n".join(lines)


def _refuse_placeholders(text: str, where: str) -> None:
    """Fixed text with a placeholder would either be filled per item (and leave the cache) or show
    the schema twice; the composer places ``{{OUTPUT_SCHEMA}}`` itself."""
    found = list(dict.fromkeys(PLACEHOLDER.findall(text)))
    if found:
        raise CriteriaError(
            f"{where}: is fixed text and may not contain {', '.join(_tag(n) for n in found)}; per-item values "
            "belong in prompt, and the output schema is added after the rubric"
        )


def compose_template(rubric: str, prompt: str | None, verdict: VerdictSpec) -> str:
    """The judge template for a rubric component: every fixed part first, then the per-item template.

    Raises ``CriteriaError`` naming the field when the rubric is empty, when fixed text (rubric,
    criteria, labels) holds a placeholder, or when the per-item template has no per-item placeholder
    or places ``{{OUTPUT_SCHEMA}}`` itself."""
    if not rubric.strip():
        raise CriteriaError("rubric: must not be empty")
    _refuse_placeholders(rubric, "rubric")
    for i, criterion in enumerate(verdict.criteria or []):
        _refuse_placeholders(criterion.description, f"verdict.criteria.{i}.description")
        for j, step in enumerate(criterion.steps):
            _refuse_placeholders(step, f"verdict.criteria.{i}.steps.{j}")
    item = DEFAULT_ITEM_TEMPLATE if prompt is None else prompt
    used = PLACEHOLDER.findall(item)
    if OUTPUT_SCHEMA in used:
        raise CriteriaError(f"prompt: may not contain {_tag(OUTPUT_SCHEMA)}; the output schema is added after the rubric")
    if not used:
        raise CriteriaError(
            "prompt: has no per-item placeholder such as {{input}} or {{output}}, so every item would get the same prompt"
        )

    parts = [rubric.strip()]
    if verdict.type == "criteria":
        parts.append(_criteria_section(verdict))
    parts.append(
        "## How to answer\n"
        f"{_how_to_answer(verdict)} Write each reasoning before the verdict it explains.\n"
        "Reply with only a JSON object that follows this JSON schema:\n"
        f"{_tag(OUTPUT_SCHEMA)}"
    )
    parts.append("## The item to grade\n" + item.strip("\n") + "\n")
    return "\n\n".join(parts)


def fixed_text_after_first_placeholder(template: str) -> str:
    """The fixed text of ``template`` after its first per-item placeholder, per-item placeholders
    left out (``{{OUTPUT_SCHEMA}}`` kept: the schema there would be fixed text outside the cache).

    A cache-first template has only short labels there ("### Output"); a long result means fixed
    text that every call pays for uncached."""
    first = next((m for m in PLACEHOLDER.finditer(template) if m.group(1) != OUTPUT_SCHEMA), None)
    if first is None:
        raise ValueError("the template has no per-item placeholder")
    rest = template[first.end() :]
    return PLACEHOLDER.sub(lambda m: m.group(0) if m.group(1) == OUTPUT_SCHEMA else "", rest)
