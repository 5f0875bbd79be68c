"""The ``kql`` kind (the KQL scoring design): a generated KQL query scored against an expected one.

Deterministic metrics: ``kql.schema_match`` (columns), ``kql.semantic_similarity`` (parsed query
structure, formula in :mod:`assay.scoring.kql.similarity`) and ``kql.results_match`` (returned rows,
formula in :mod:`assay.scoring.kql.results`). The LLM grade is the judge component.

What the queries returned comes from one of two places:

- the item itself (``generated_columns`` / ``generated_results`` / ``generated_error`` and their
  expected twins), as the KQL scoring design's ``POST /api/score-query`` receives them;
- a registered ``dataset``: both queries are run offline (:mod:`assay.scoring.kql.offline`) with
  ``now()`` pinned to the item's ``now``, else the score's creation time. What they return there
  is what is compared (results the item also supplies are then only a fallback). Then:

  - any failure of the *expected* query offline (it does not parse, names an unknown table or
    column, fails in DuckDB's binder, holds a datetime literal the engine reads as null, or meets a
    gap in the engine) means "cannot execute offline": never the generated query's fault. The
    components fall back to results supplied in the item, else are ``skipped`` with the reason;
  - an error in the *generated* query is "did not execute": both score 0 with the error in their
    details, and the item cannot pass (:func:`_pass_blockers`);
  - a gap in the offline engine (``KqlUnsupported``, a datetime literal read as null) in the
    generated query says nothing about it: as for the expected query, supplied results or skipped;
  - an error the item reports itself (``generated_error`` / ``expected_error``) is the real engine's
    word and is taken as given: nothing runs offline. An expected query that failed leaves nothing
    to compare: skipped.

When the expected query's output is not uniquely determined (ties, ``take`` without a sort, the
default join kind), the comparison accepts any valid answer (:mod:`assay.scoring.kql.ties`).

A pass needs execution evidence (invariant 7, the KQL scoring design's "it executes"): results match names a
pass blocker when it could not compare results (no dataset and no results, or a query that cannot
run offline with nothing supplied), and, with ``must_match`` (``kql_strict``), when the results it
compared differ. The total still shows what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.verdicts import register_verdict
from assay.scoring.kinds import Kind
from assay.scoring.kql import KqlParseError, offline, parse_query, ties
from assay.scoring.kql.report import kql_live_lines, kql_report_row
from assay.scoring.kql.results import (
    ResultsMode,
    align_columns,
    best_answer,
    column_key,
    compare_rows,
)
from assay.scoring.kql.similarity import SimilarityWeights, compare_structures
from assay.scoring.metrics.registry import ComponentResult, MetricContext, metric

Row = dict[str, Any]


class KqlItem(BaseModel):
    """One generated query with its expected twin, as the KQL scoring design's ``POST /api/score-query`` receives it."""

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
    unsupported: str | None = None  # why a query could not run offline (then: supplied values)
    answers: ties.Answers | None = None  # every valid answer, when the expected output is open
    details: dict[str, Any] = field(default_factory=dict)

    def expected_for(self) -> tuple[list[Row], dict[str, str]]:
        """The expected rows to compare with, and the renamed columns: among the valid answers,
        the one closest to the generated rows (the expected run's own rows when only one is valid).
        Columns are aligned on the expected run, then again on the answer picked with them."""
        expected = self.expected_rows or []
        generated = self.generated_rows or []
        columns = self.expected_columns or []
        generated_columns = self.generated_columns or []
        renamed = align_columns(columns, expected, generated_columns, generated)
        if self.answers is None or not self.answers.open:
            return expected, renamed
        groups, ordered = self.answers.groups, self.answers.ordered
        picked = best_answer(groups, ordered, generated, renamed)
        again = align_columns(columns, picked, generated_columns, generated)
        if again != renamed:
            renamed, picked = again, best_answer(groups, ordered, generated, again)
        return picked, renamed


def _supplied(item: KqlItem, details: dict[str, Any] | None = None) -> _Returned:
    return _Returned(
        item.expected_columns,
        item.generated_columns,
        item.expected_results,
        item.generated_results,
        generated_error=item.generated_error,
        details=details or {},
    )


def _cannot_run(item: KqlItem, failures: dict[str, str]) -> _Returned:
    """Nothing offline can be used: the item's supplied results, with the reason kept."""
    fallback = _supplied(item, {"source": "supplied", "dataset": item.dataset, "offline_unsupported": failures})
    fallback.unsupported = "; ".join(f"the {role} query cannot be executed offline ({why})" for role, why in failures.items())
    return fallback


def _returned(item: KqlItem, ctx: MetricContext) -> _Returned:
    """Run both queries on the item's dataset (cached per process), or take what the item supplies."""
    if item.dataset is None or item.generated_error or item.expected_error:
        return _supplied(item, {"source": "supplied"} if item.dataset else None)
    now = item.now or ctx.now
    loader = ctx.dataset_loader or offline.store_loader
    dataset = item.dataset
    expected = offline.execute(item.expected_kql, dataset, now, loader)
    if expected.status != "ok":
        return _cannot_run(item, {"expected": expected.message or expected.status})
    where = {"source": "offline", "dataset": dataset, "now": now.isoformat()}
    generated = offline.execute(item.generated_kql, dataset, now, loader)
    if generated.status == "error":
        return _Returned(None, None, None, None, generated_error=generated.message, details=where)
    if generated.status == "unsupported":
        return _cannot_run(item, {"generated": generated.message or generated.status})
    truncated = [role for role, o in (("expected", expected), ("generated", generated)) if o.truncated]
    if truncated:
        where["truncated"] = {"queries": truncated, "rows_kept": offline.MAX_RESULT_ROWS}
    answers = None
    tie_plan = ties.plan(item.expected_kql)
    if tie_plan is not None:
        found = ties.answers(tie_plan, lambda query: offline.execute(query, dataset, now, loader))
        if isinstance(found, str):
            where["ties"] = {"construct": tie_plan.construct, "note": f"{found}; compared with the expected run's rows"}
        else:
            answers = found
            if found.open:
                where["ties"] = {"construct": tie_plan.construct, "note": "any valid answer of the expected query is accepted"}
    return _Returned(
        list(expected.columns),
        list(generated.columns),
        list(expected.rows),
        list(generated.rows),
        answers=answers,
        details=where,
    )


def _did_not_execute(returned: _Returned) -> ComponentResult:
    return ComponentResult.ok(
        0.0, {"reason": "generated query did not execute", "error": returned.generated_error, **returned.details}
    )


def _nothing_to_compare(returned: _Returned, missing: str, *, blocks: bool = False) -> ComponentResult:
    """Skipped: nothing to compare. ``blocks``: name the evidence blocker (results match does; one
    component naming it is enough)."""
    if returned.unsupported:
        reason = f"{returned.unsupported}, and the item supplies no {missing} to fall back on"
    else:
        reason = f"the item has no {missing} to compare with"
    return ComponentResult.skipped(reason, returned.details, pass_blocker=f"no execution evidence: {reason}" if blocks else None)


def _expected_did_not_execute(item: KqlItem, returned: _Returned, *, blocks: bool = False) -> ComponentResult:
    reason = f"the expected query did not execute (the item says: {item.expected_error}); nothing to compare with"
    return ComponentResult.skipped(reason, returned.details, pass_blocker=f"no execution evidence: {reason}" if blocks else None)


@metric("kql.schema_match", version=3, kinds=("kql",))
def schema_match() -> Any:
    """Design 000: ``1 - missing / expected`` columns; extra columns are free.

    A column is missing when the generated result has it under no name: a column renamed by an
    alias, whose values show it is the same column (:func:`~assay.scoring.kql.results.align_columns`),
    counts as present and is listed in ``renamed_columns`` (expected name -> generated name).
    Version 2: renamed columns (version 1 counted them missing). Version 3: an expected query that
    fails offline is skipped (cannot execute offline), not failed; renamed columns are found on the
    valid answer closest to the generated rows when the expected output is open (ties)."""

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        returned = _returned(item, ctx)
        if returned.generated_error:
            return _did_not_execute(returned)
        if item.expected_error and returned.expected_columns is None:
            return _expected_did_not_execute(item, returned)
        if returned.expected_columns is None:
            return _nothing_to_compare(returned, "expected columns")
        expected = list(dict.fromkeys(returned.expected_columns))
        if not expected:
            return ComponentResult.skipped("the expected query returned no columns", returned.details)
        if returned.generated_columns is None and returned.unsupported:
            return _nothing_to_compare(returned, "generated columns")
        generated_columns = returned.generated_columns or []
        _, renamed = returned.expected_for()
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


@metric("kql.results_match", version=3, kinds=("kql",))
def results_match(mode: ResultsMode = "recall", must_match: bool = False) -> Any:
    """Design 000: expected rows found / expected rows (``recall``); ``f1`` also penalises extra rows.
    Every row of both results is compared. Row order counts only when the expected query ends in a
    sort. A column renamed by an alias is compared under its expected name (``renamed_columns`` in
    the details; formula and rule in :mod:`assay.scoring.kql.results`). When the expected output is
    not uniquely determined, any valid answer is accepted (:mod:`assay.scoring.kql.ties`).
    ``generated_rows`` in the details is the number of rows the generated query returned.

    Pass blockers: when no results could be compared (``no execution evidence``), and, with
    ``must_match``, when the results compared differ (score below 1).

    Version 2: renamed columns (version 1 found no row with one). Version 3: ties, every row compared
    (``max_rows`` is gone), an expected query failing offline skipped as "cannot execute offline",
    the evidence blocker, ``must_match``."""
    if mode not in ("recall", "f1"):
        raise CriteriaError(f"kql.results_match: mode must be 'recall' or 'f1', got {mode!r}")
    if not isinstance(must_match, bool):
        raise CriteriaError(f"kql.results_match: must_match must be true or false, got {must_match!r}")

    def score(item: KqlItem, ctx: MetricContext) -> ComponentResult:
        returned = _returned(item, ctx)
        if returned.generated_error:
            return _did_not_execute(returned)
        if item.expected_error and returned.expected_rows is None:
            return _expected_did_not_execute(item, returned, blocks=True)
        if returned.expected_rows is None:
            return _nothing_to_compare(returned, "expected results", blocks=True)
        if returned.generated_rows is None:
            return _nothing_to_compare(returned, "generated results", blocks=True)
        note = None
        try:
            ordered = parse_query(item.expected_kql).ordered
        except KqlParseError as exc:
            ordered, note = False, f"row order ignored: the expected query does not parse ({exc.message})"
        expected, renamed = returned.expected_for()
        value, details = compare_rows(
            expected,
            returned.generated_rows,
            ordered=ordered,
            mode=mode,
            expected_columns=returned.expected_columns,
            generated_columns=returned.generated_columns,
            renamed=renamed,
        )
        if note:
            details["note"] = note
        details.update(returned.details)
        if must_match and value < 1.0:
            return ComponentResult.ok(
                value, details, pass_blocker=f"the results differ from the expected results ({mode} {value:.3f})"
            )
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
    engine gap (``unsupported``) is not an error here; that nothing could be compared then is the
    results match's blocker. When the check itself cannot be made, the item is blocked with the
    reason rather than passed unchecked.
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
    pass_blockers=_pass_blockers,
    report_row=kql_report_row,
    live_lines=kql_live_lines,
)

register_verdict("kql_grade", KqlGrade, _verdict_score)
