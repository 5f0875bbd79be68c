"""Text checks on the output: exact match, contains, regex, starts with, length bounds.

A non-string output (the generic item allows any JSON value) is checked as its JSON text. Every
check scores 1 (holds) or 0 (does not); what was found or missing is in the details.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import Field, field_validator, model_validator

from assay.scoring.metrics.library._common import (
    EXPECTED,
    KINDS,
    Args,
    as_text,
    compile_re2,
    output_text,
    text_arg,
)
from assay.scoring.metrics.registry import (
    BadItemValue,
    ComponentResult,
    ItemRef,
    Metric,
    MetricContext,
    metric,
    resolve_arg,
)
from assay.scoring.metrics.work import Work, WorkBound


def _fold(text: str, case_sensitive: bool) -> str:
    return text if case_sensitive else text.casefold()


# --- exact match ---------------------------------------------------------------------------------


class ExactMatchArgs(Args):
    value: str | ItemRef = Field(EXPECTED, description="what the output must equal; default: the item's expected")
    case_sensitive: bool = True
    ignore_whitespace: bool = Field(False, description="leading/trailing whitespace ignored, inner runs count as one space")
    ignore_punctuation: bool = Field(False, description="every Unicode punctuation character removed before comparing")


def _normalise(text: str, args: ExactMatchArgs) -> str:
    if args.ignore_punctuation:
        text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    if args.ignore_whitespace:
        text = " ".join(text.split())
    return _fold(text, args.case_sensitive)


@metric("exact_match", version=1, kinds=KINDS, args_model=ExactMatchArgs)
def exact_match(args: ExactMatchArgs) -> Metric:
    """1 when the output equals ``value`` after the chosen normalisation, else 0."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        match = _normalise(output_text(item), args) == _normalise(text_arg(args.value, item), args)
        return ComponentResult.ok(1.0 if match else 0.0, {"match": match})

    return score


# --- contains ------------------------------------------------------------------------------------


class ContainsArgs(Args):
    value: str | ItemRef = Field(..., description="the text to look for (a constant or a per-item value)")
    case_sensitive: bool = True

    @field_validator("value")
    @classmethod
    def _not_empty(cls, value: str | ItemRef) -> str | ItemRef:
        if value == "":
            raise ValueError("an empty string is contained in every output; give some text")
        return value


def _contains(args: ContainsArgs, item: Any) -> tuple[bool, str]:
    needle = text_arg(args.value, item)
    return _fold(needle, args.case_sensitive) in _fold(output_text(item), args.case_sensitive), needle


@metric("contains", version=1, kinds=KINDS, args_model=ContainsArgs)
def contains(args: ContainsArgs) -> Metric:
    """1 when the output contains ``value``, else 0."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        found, _ = _contains(args, item)
        return ComponentResult.ok(1.0 if found else 0.0, {"found": found})

    return score


@metric("not_contains", version=1, kinds=KINDS, args_model=ContainsArgs)
def not_contains(args: ContainsArgs) -> Metric:
    """1 when the output does not contain ``value``, else 0."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        found, _ = _contains(args, item)
        return ComponentResult.ok(0.0 if found else 1.0, {"found": found})

    return score


class ContainsManyArgs(Args):
    values: list[str] | ItemRef = Field(..., description="the texts to look for; a per-item value must be a list of strings")
    case_sensitive: bool = True

    @field_validator("values")
    @classmethod
    def _usable(cls, values: list[str] | ItemRef) -> list[str] | ItemRef:
        if isinstance(values, list):
            if not values:
                raise ValueError("give at least one text")
            if "" in values:
                raise ValueError("an empty string is contained in every output; remove it")
        return values


def _values(args: ContainsManyArgs, item: Any) -> list[str]:
    values = resolve_arg(args.values, item)
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
        raise BadItemValue(f"{args.values} must be a non-empty list of non-empty strings, got {as_text(values)[:200]}")
    return values


def _found(args: ContainsManyArgs, item: Any) -> tuple[list[str], list[str]]:
    values = _values(args, item)
    output = _fold(output_text(item), args.case_sensitive)
    found = [v for v in values if _fold(v, args.case_sensitive) in output]
    return found, [v for v in values if v not in found]


# Each text is looked for in the whole output: about a second per 1.4 billion characters searched.
MAX_CHARS_SEARCHED = 1_000_000_000


def _chars_searched(args: ContainsManyArgs, item: Any) -> Work:
    values, output = len(_values(args, item)), len(output_text(item))
    return Work(values * output, f"{values:,} texts x {output:,} output characters")


SEARCH_BOUND = WorkBound("characters searched", MAX_CHARS_SEARCHED, _chars_searched)


@metric("contains_all", version=1, kinds=KINDS, args_model=ContainsManyArgs, bounds=(SEARCH_BOUND,))
def contains_all(args: ContainsManyArgs) -> Metric:
    """1 when the output contains every one of ``values``, else 0; ``missing`` lists the others."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        _, missing = _found(args, item)
        return ComponentResult.ok(0.0 if missing else 1.0, {"missing": missing})

    return score


@metric("contains_any", version=1, kinds=KINDS, args_model=ContainsManyArgs, bounds=(SEARCH_BOUND,))
def contains_any(args: ContainsManyArgs) -> Metric:
    """1 when the output contains at least one of ``values``, else 0; ``found`` lists them."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        found, _ = _found(args, item)
        return ComponentResult.ok(1.0 if found else 0.0, {"found": found})

    return score


class StartsWithArgs(ContainsArgs):
    value: str | ItemRef = Field(..., description="the text the output must start with")


@metric("starts_with", version=1, kinds=KINDS, args_model=StartsWithArgs)
def starts_with(args: StartsWithArgs) -> Metric:
    """1 when the output starts with ``value`` (leading whitespace counts), else 0."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        prefix = _fold(text_arg(args.value, item), args.case_sensitive)
        holds = _fold(output_text(item), args.case_sensitive).startswith(prefix)
        return ComponentResult.ok(1.0 if holds else 0.0, {"starts_with": holds})

    return score


# --- regex ---------------------------------------------------------------------------------------

# How much of a match the details keep.
_MATCH_EXCERPT = 200
# A pattern is a line or two of text; a longer one (a per-item pattern) is refused before it compiles.
MAX_PATTERN_CHARS = 1_000
# RE2 runs in time linear in the output, times the pattern's program size when its DFA runs out of
# memory (a pattern like [a-j]{1,1000}[a-j]{1,1000}...): about 7 ns a step at worst, so this bound
# keeps a match under a second.
MAX_REGEX_STEPS = 100_000_000


class RegexArgs(Args):
    pattern: str | ItemRef = Field(..., description="an RE2 pattern searched anywhere in the output (anchor with ^ and $)")
    case_sensitive: bool = True

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | ItemRef) -> str | ItemRef:
        if isinstance(pattern, str):
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"a pattern of {len(pattern):,} characters is longer than {MAX_PATTERN_CHARS:,}")
            compile_re2(pattern, True)  # whether a pattern compiles does not depend on case
        return pattern


def _pattern_chars(args: RegexArgs, item: Any) -> Work:
    length = len(text_arg(args.pattern, item))
    return Work(length, f"a pattern of {length:,} characters")


def _compiled(args: RegexArgs, item: Any) -> Any:
    try:
        return compile_re2(text_arg(args.pattern, item), args.case_sensitive)
    except ValueError as exc:
        raise BadItemValue(f"{args.pattern}: {exc}") from exc


def _regex_steps(args: RegexArgs, item: Any) -> Work:
    program, output = _compiled(args, item).programsize, len(output_text(item))
    return Work(program * output, f"a pattern program of {program:,} instructions x {output:,} output characters")


# In this order: a per-item pattern's length before it is compiled to measure its program.
REGEX_BOUNDS = (
    WorkBound("pattern characters", MAX_PATTERN_CHARS, _pattern_chars),
    WorkBound("RE2 steps", MAX_REGEX_STEPS, _regex_steps),
)


@metric("regex_match", version=1, kinds=KINDS, args_model=RegexArgs, bounds=REGEX_BOUNDS)
def regex_match(args: RegexArgs) -> Metric:
    """1 when ``pattern`` matches somewhere in the output, else 0; ``match`` is the text it matched."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        found = _compiled(args, item).search(output_text(item))
        if found is None:
            return ComponentResult.ok(0.0, {"match": None})
        return ComponentResult.ok(1.0, {"match": found.group(0)[:_MATCH_EXCERPT]})

    return score


# --- length --------------------------------------------------------------------------------------


class LengthArgs(Args):
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> LengthArgs:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self

    def within(self, length: int) -> bool:
        return (self.min is None or length >= self.min) and (self.max is None or length <= self.max)


@metric("length_chars", version=1, kinds=KINDS, args_model=LengthArgs)
def length_chars(args: LengthArgs) -> Metric:
    """1 when the output's length in characters (Unicode code points) is within [min, max], else 0."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        length = len(output_text(item))
        return ComponentResult.ok(1.0 if args.within(length) else 0.0, {"length": length})

    return score


@metric("length_words", version=1, kinds=KINDS, args_model=LengthArgs)
def length_words(args: LengthArgs) -> Metric:
    """1 when the output's word count (runs of non-whitespace) is within [min, max], else 0."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        length = len(output_text(item).split())
        return ComponentResult.ok(1.0 if args.within(length) else 0.0, {"length": length})

    return score
