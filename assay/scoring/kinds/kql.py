"""The ``kql`` kind (design 000): a generated KQL query scored against an expected one.

Deterministic metrics: ``kql.schema_match`` (columns), ``kql.semantic_similarity`` (parsed query
structure, formula in :mod:`assay.scoring.kql.similarity`) and ``kql.results_match`` (returned rows,
formula in :mod:`assay.scoring.kql.results`). The LLM grade is the judge component.

What the queries returned comes from one of two places:

- the item itself (``generated_columns`` / ``generated_results`` / ``generated_error`` and their
  expected twins), as design 000's ``POST /api/score-query`` receives them;
- a registered ``dataset``: both queries are run offline (:mod:`assay.scoring.kql.offline`) with
  ``now()`` pinned to the item's ``now``, else the score's creation time. What they return there
  is what is compared (results the item also supplies are then only a fallback). Then:

  - an error in the *expected* query (it does not parse, names an unknown table or column) fails
    schema match and results match, with the reason: the item is wrong, not the generation;
  - an error in the *generated* query is "did not execute": both score 0 with the error in their
    details, and the item cannot pass (:func:`_pass_blockers`);
  - a gap in the offline engine (``KqlUnsupported``) in either query says nothing about the query:
    the components fall back to results supplied in the item, else are ``skipped`` with the reason;
  - an error the item reports itself (``generated_error`` / ``expected_error``) is the real engine's
    word and is taken as given: nothing runs offline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds import Kind
from assay.scoring.kql import KqlParseError, offline, parse_query
from assay.scoring.kql.report import kql_live_lines, kql_report_row
from assay.scoring.kql.results import (
    ResultsMode,
    align_columns,
    column_key,
    compare_rows,
)
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
    dataset: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="A registered dataset (content hash or name) to run both queries on offline; "
        "ingest replaces a name by the content hash.",
    )
    now: datetime | None = Field(
        None,
        description="The instant now() and ago() read when the queries run offline (UTC when no zone is "
        "given); default: the score's creation time.",
    )

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


@dataclass
class _Returned:
    """What the two queries returned, and where it came from (``details`` says, for dataset items)."""

    expected_columns: list[str] | None
    generated_columns: list[str] | None
    expected_rows: list[Row] | None
    generated_rows: list[Row] | None
    generated_error: str | None = None
    expected_error: str | None = None  # set only by an offline run: the supplied one is item.expected_error
    unsupported: str | None = None  # why the offline engine could not run a query (then: supplied values)
    details: dict[str, Any] = field(default_factory=dict)


def _supplied(item: KqlItem, details: dict[str, Any] | None = None) -> _Returned:
    return _Returned(
        item.expected_columns,
        item.generated_columns,
        item.expected_results,
        item.generated_results,
        generated_error=item.generated_error,
        details=details or {},
    )


def _returned(item: KqlItem, ctx: MetricContext) -> _Returned:
    """Run both queries on the item's dataset (cached per process), or take what the item supplies."""
    if item.dataset is None or item.generated_error or item.expected_error:
        return _supplied(item, {"source": "supplied"} if item.dataset else None)
    now = item.now or ctx.now
    loader = ctx.dataset_loader or offline.store_loader
    expected = offline.execute(item.expected_kql, item.dataset, now, loader)
    where = {"source": "offline", "dataset": item.dataset, "now": now.isoformat()}
    if expected.status == "error":
        return _Returned(None, None, None, None, expected_error=expected.message, details=where)
    generated = offline.execute(item.generated_kql, item.dataset, now, loader)
    if generated.status == "error":
        return _Returned(None, None, None, None, generated_error=generated.message, details=where)
    gaps = {role: o.message for role, o in (("expected", expected), ("generated", generated)) if o.status == "unsupported"}
    if gaps:
        fallback = _supplied(item, {"source": "supplied", "dataset": item.dataset, "offline_unsupported": gaps})
        fallback.unsupported = "; ".join(f"the {role} query cannot be executed offline ({why})" for role, why in gaps.items())
        return fallback
    truncated = [role for role, o in (("expected", expected), ("generated", generated)) if o.truncated]
    if truncated:
        where["truncated"] = {"queries": truncated, "rows_kept": offline.MAX_RESULT_ROWS}
    return _Returned(
        list(expected.columns), list(generated.columns), list(expected.rows), list(generated.rows), details=where
    )


def _did_not_execute(returned: _Returned) -> ComponentResult:
    return ComponentResult.ok(
        0.0, {"reason": "generated query did not execute", "error": returned.generated_error, **returned.details}
    )


def _nothing_to_compare(returned: _Returned, missing: str) -> ComponentResult:
    if returned.unsupported:
        return ComponentResult.skipped(
            f"{returned.unsupported}, and the item supplies no {missing} to fall back on", returned.details
        )
    return ComponentResult.skipped(f"the item has no {missing} to compare with")


@metric("kql.schema_match", version=2, kinds=("kql",))
def schema_match() -> Any:
    """Design 000: ``1 - missing / expected`` columns; extra columns are free.

    A column is missing when the generated result has it under no name: a column renamed by an
    alias, whose values show it is the same column (:func:`~assay.scoring.kql.results.align_columns`),
    counts as present and is listed in ``renamed_columns`` (expected name -> generated name).
    Version 2: renamed columns (version 1 counted them missing)."""

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        returned = _returned(item, ctx)
        if returned.generated_error:
            return _did_not_execute(returned)
        if returned.expected_error:
            return ComponentResult.failed(f"the expected query did not execute: {returned.expected_error}", returned.details)
        if returned.expected_columns is None:
            return _nothing_to_compare(returned, "expected columns")
        expected = list(dict.fromkeys(returned.expected_columns))
        if not expected:
            return ComponentResult.skipped("the expected query returned no columns", returned.details)
        if returned.generated_columns is None and returned.unsupported:
            return _nothing_to_compare(returned, "generated columns")
        generated_columns = returned.generated_columns or []
        renamed = align_columns(
            expected, returned.expected_rows or [], generated_columns, returned.generated_rows or []
        )
        generated = {column_key(c) for c in generated_columns}
        wanted = {column_key(e) for e in expected}
        used = {column_key(g) for g in renamed.values()}
        missing = [c for c in expected if column_key(c) not in generated and c not in renamed]
        extra = [c for c in generated_columns if column_key(c) not in wanted and column_key(c) not in used]
        details: dict[str, Any] = {
            "expected_columns": expected,
            "missing_columns": missing,
            "extra_columns": extra,
            "renamed_columns": renamed,
        }
        if renamed:
            details["note"] = (
                "renamed columns count as present: the generated result holds their values under another name"
            )
        return ComponentResult.ok(1.0 - len(missing) / len(expected), {**details, **returned.details})

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


@metric("kql.results_match", version=2, kinds=("kql",))
def results_match(mode: ResultsMode = "recall", max_rows: int = 100) -> Any:
    """Design 000: expected rows found / expected rows (``recall``); ``f1`` also penalises extra rows.
    Row order counts only when the expected query ends in a sort. A column renamed by an alias is
    compared under its expected name (``renamed_columns`` in the details; formula and rule in
    :mod:`assay.scoring.kql.results`). ``generated_rows`` in the details is the number of rows the
    generated query returned. Version 2: renamed columns (version 1 found no row with one)."""
    if mode not in ("recall", "f1"):
        raise CriteriaError(f"kql.results_match: mode must be 'recall' or 'f1', got {mode!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise CriteriaError(f"kql.results_match: max_rows must be a positive integer, got {max_rows!r}")

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        returned = _returned(item, ctx)
        if returned.generated_error:
            return _did_not_execute(returned)
        expected_error = returned.expected_error or (item.expected_error if returned.details.get("source") != "offline" else None)
        if expected_error:
            return ComponentResult.failed(f"the expected query did not execute: {expected_error}", returned.details)
        if returned.expected_rows is None:
            return _nothing_to_compare(returned, "expected results")
        if returned.generated_rows is None:
            return _nothing_to_compare(returned, "generated results")
        note = None
        try:
            ordered = parse_query(item.expected_kql).ordered
        except KqlParseError as exc:
            ordered, note = False, f"row order ignored: the expected query does not parse ({exc.message})"
        value, details = compare_rows(
            returned.expected_rows,
            returned.generated_rows,
            ordered=ordered,
            mode=mode,
            max_rows=max_rows,
            expected_columns=returned.expected_columns,
            generated_columns=returned.generated_columns,
        )
        if note:
            details["note"] = note
        details.update(returned.details)
        return ComponentResult.ok(value, details)

    return score


def _judge_inputs(item: KqlItem) -> dict[str, str]:
    return {"PROMPT": item.prompt, "GENERATED_KQL": item.generated_kql, "EXPECTED_KQL": item.expected_kql}


def _verdict_score(verdict: KqlGrade) -> tuple[float, dict[str, Any]]:
    return verdict.score, {"reasoning": verdict.reasoning}


def _pass_blockers(item: KqlItem) -> list[str]:
    """Design 000: an item passes only if its generated query executed without error.

    For a dataset item, the verdict of the offline run the components made in this process is
    reused (:func:`assay.scoring.kql.offline.check`); in another process the query is bound on the
    dataset without running it, which finds the same errors (syntax, unknown table or column). An
    engine gap (``unsupported``) never blocks. When the check itself cannot be made, the item is
    blocked with the reason rather than passed unchecked.
    """
    if item.generated_error:
        return [f"generated query did not execute: {item.generated_error}"]
    if item.dataset is None or item.expected_error:
        return []
    try:
        verdict = offline.check(item.generated_kql, item.dataset, offline.store_loader)
    except Exception as exc:  # the store or the dataset is unavailable: do not pass unchecked
        return [f"could not check offline that the generated query executes: {type(exc).__name__}: {exc}"]
    return [f"generated query did not execute: {verdict.message}"] if verdict.status == "error" else []


KIND = Kind(
    name="kql",
    item_model=KqlItem,
    judge_inputs=_judge_inputs,
    verdict_score=_verdict_score,
    pass_blockers=_pass_blockers,
    report_row=kql_report_row,
    live_lines=kql_live_lines,
)
