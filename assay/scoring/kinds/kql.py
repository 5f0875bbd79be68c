"""The ``kql`` kind (design 000): a generated KQL query scored against an expected one.

Deterministic metrics: ``kql.schema_match`` (columns), ``kql.semantic_similarity`` (parsed query
structure, formula in :mod:`assay.scoring.kql.similarity`) and ``kql.results_match`` (returned rows,
formula in :mod:`assay.scoring.kql.results`). The LLM grade is the judge component.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds import Kind
from assay.scoring.kql import KqlParseError, parse_query
from assay.scoring.kql.results import ResultsMode, compare_rows
from assay.scoring.kql.similarity import SimilarityWeights, compare_structures
from assay.scoring.metrics.registry import ComponentResult, MetricContext, metric

Row = dict[str, Any]


class KqlItem(BaseModel):
    """One generated query with its expected twin, as design 000's ``POST /api/score-query`` receives it."""

    model_config = ConfigDict(extra="forbid", str_max_length=200_000)

    id: str | None = Field(None, max_length=255, description="Your identifier for the item (kept as its external id).")
    prompt: str = Field(..., description="The user's natural-language request.")
    generated_kql: str = Field(..., min_length=1)
    expected_kql: str = Field(..., min_length=1)
    generated_columns: list[str] | None = None
    expected_columns: list[str] | None = None
    generated_results: list[Row] | None = None
    expected_results: list[Row] | None = None
    generated_error: str | None = Field(None, description="Set when the generated query failed to execute.")
    expected_error: str | None = Field(None, description="Set when the expected query failed to execute.")

    @model_validator(mode="after")
    def _columns_from_rows(self) -> KqlItem:
        # Design 000 sends columns beside rows; when only rows came, their keys are the columns.
        if self.generated_columns is None and self.generated_results:
            self.generated_columns = list(self.generated_results[0])
        if self.expected_columns is None and self.expected_results:
            self.expected_columns = list(self.expected_results[0])
        return self


class KqlGrade(BaseModel):
    """The judge's verdict on one generated query."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(..., ge=0.0, le=1.0, description="0 = useless, 1 = fully correct and equivalent")
    reasoning: str = Field(..., description="Why this score: correctness, tables, filters, aggregations, efficiency")


def _normalise_column(name: str) -> str:
    return name.strip().lower()


@metric("kql.schema_match", version=1, kinds=("kql",))
def schema_match() -> Any:
    """Design 000: ``1 - missing / expected`` columns; extra columns are free."""

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        if item.generated_error:
            return ComponentResult.ok(0.0, {"reason": "generated query did not execute", "error": item.generated_error})
        if item.expected_columns is None:
            return ComponentResult.skipped("the item has no expected columns to compare with")
        expected = list(dict.fromkeys(item.expected_columns))
        if not expected:
            return ComponentResult.skipped("the expected query returned no columns")
        generated = {_normalise_column(c) for c in item.generated_columns or []}
        missing = [c for c in expected if _normalise_column(c) not in generated]
        extra = [c for c in item.generated_columns or [] if _normalise_column(c) not in {_normalise_column(e) for e in expected}]
        return ComponentResult.ok(
            1.0 - len(missing) / len(expected),
            {"expected_columns": expected, "missing_columns": missing, "extra_columns": extra},
        )

    return score


@metric("kql.semantic_similarity", version=1, kinds=("kql",))
def semantic_similarity(
    tables: float = 0.4,
    filters: float = 0.3,
    aggregations: float = 0.3,
    strict: bool = False,
    sort: float = 0.1,
    take: float = 0.1,
    join_kind: float = 0.05,
    projection: float = 0.1,
) -> Any:
    """Design 000's tables / filters / aggregations split over the parsed queries; ``strict`` also
    weighs sort, take, join kind and projection. Each part is a Jaccard index of normalised sets."""
    try:
        weights = SimilarityWeights(tables, filters, aggregations, strict, sort, take, join_kind, projection)
    except ValueError as exc:
        raise CriteriaError(f"kql.semantic_similarity: {exc}") from exc

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        try:
            expected = parse_query(item.expected_kql)
        except KqlParseError as exc:
            return ComponentResult.failed(f"the expected query does not parse: {exc.message}")
        try:
            generated = parse_query(item.generated_kql)
        except KqlParseError as exc:
            # A query that does not parse is a failed generation, scored as such.
            return ComponentResult.ok(0.0, {"reason": "the generated query does not parse", "error": exc.message})
        value, details = compare_structures(expected, generated, weights)
        return ComponentResult.ok(value, details)

    return score


@metric("kql.results_match", version=1, kinds=("kql",))
def results_match(mode: ResultsMode = "recall", max_rows: int = 100) -> Any:
    """Design 000: expected rows found / expected rows (``recall``); ``f1`` also penalises extra rows.
    Row order counts only when the expected query ends in a sort."""
    if mode not in ("recall", "f1"):
        raise CriteriaError(f"kql.results_match: mode must be 'recall' or 'f1', got {mode!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise CriteriaError(f"kql.results_match: max_rows must be a positive integer, got {max_rows!r}")

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        if item.generated_error:
            return ComponentResult.ok(0.0, {"reason": "generated query did not execute", "error": item.generated_error})
        if item.expected_error:
            return ComponentResult.failed(f"the expected query did not execute: {item.expected_error}")
        if item.expected_results is None:
            return ComponentResult.skipped("the item has no expected results to compare with")
        if item.generated_results is None:
            return ComponentResult.skipped("the item has no generated results to compare with")
        note = None
        try:
            ordered = parse_query(item.expected_kql).ordered
        except KqlParseError as exc:
            ordered, note = False, f"row order ignored: the expected query does not parse ({exc.message})"
        value, details = compare_rows(
            item.expected_results, item.generated_results, ordered=ordered, mode=mode, max_rows=max_rows
        )
        if note:
            details["note"] = note
        return ComponentResult.ok(value, details)

    return score


def _judge_inputs(item: KqlItem) -> dict[str, str]:
    return {"PROMPT": item.prompt, "GENERATED_KQL": item.generated_kql, "EXPECTED_KQL": item.expected_kql}


def _verdict_score(verdict: KqlGrade) -> tuple[float, dict[str, Any]]:
    return verdict.score, {"reasoning": verdict.reasoning}


def _pass_blockers(item: KqlItem) -> list[str]:
    return [f"generated query did not execute: {item.generated_error}"] if item.generated_error else []


KIND = Kind(
    name="kql",
    item_model=KqlItem,
    judge_inputs=_judge_inputs,
    verdict_score=_verdict_score,
    pass_blockers=_pass_blockers,
)
