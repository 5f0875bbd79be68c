"""The ``pandas_codegen`` kind (the pandas code-generation design): generated pandas code, scored from its structure and
from real runs in the sandbox.

An item is a question, the data it is about, the generated code, and optionally reference code
and/or the expected result and the model's recovery attempts. The code the model ended with (its
last recovery attempt, else the generated code) is what correctness, quality, performance,
understanding and coverage score; an item with neither reference code nor an expected result
cannot pass: its correctness component is skipped and names that as a pass blocker. The data is either a registered
dataset (``dataset``: content hash or name, resolved at ingest; CSV / Parquet / JSON tables) or
inline ``frames`` (table name -> list of records). The code sees every table under its name,
``dfs`` (name -> frame) and, when there is a single table, ``df``; plus ``pd`` and ``np``. Its
answer is the ``result`` variable, or the value of its last expression.

Metrics (all registered here, formulas in :mod:`assay.scoring.pandas.metrics`):

- ``pandas.prompt_understanding`` (0.4 columns / 0.3 language patterns / 0.3 statistics);
- ``pandas.requirement_coverage`` (0.3 filters / 0.3 groupby columns / 0.2 sorting / 0.2 joins);
- ``pandas.error_recovery`` (0.5 success rate / 0.3 fix quality / 0.2 attempts made), attempts
  re-executed; ``skipped`` for an item whose generated code ran without error;
- ``pandas.correctness`` (results compared, :mod:`assay.scoring.pandas.compare`);
- ``pandas.code_quality`` (ruff + AST smells);
- ``pandas.performance`` (best of 3 time, peak memory, banded relative to the reference).

The optional judge component (verdict ``pandas_review``, prompt ``prompts/pandas_review.md``)
reviews the code as a senior reviewer would.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.verdicts import register_verdict
from assay.scoring.kinds import Kind
from assay.scoring.metrics.registry import ComponentResult, MetricContext, metric
from assay.scoring.pandas import metrics as m
from assay.scoring.pandas.compare import Tolerance
from assay.scoring.pandas.report import pandas_report_row

KIND_NAME = "pandas_codegen"
TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_NAMES = {"pd", "np", "dfs", "result", "__builtins__"}
MAX_INLINE_ROWS = 100_000
MAX_RECOVERY_ATTEMPTS = 10

Scalar = Union[bool, int, float, str, None]


class RecoveryAttempt(BaseModel):
    """One fix the model made after an error."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(..., min_length=1, max_length=200_000, description="The fixed code.")
    error: str | None = Field(
        None,
        max_length=20_000,
        description="The error this attempt produced when it was generated. Shown only: every attempt is re-executed.",
    )


class PandasItem(BaseModel):
    """One generated piece of pandas code with the question it answers."""

    model_config = ConfigDict(extra="forbid", str_max_length=200_000)

    id: str | None = Field(None, max_length=255, description="Your identifier for the item (kept as its external id).")
    question: str = Field(..., min_length=1, description="The user's natural-language question.")
    dataset: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="A registered dataset (content hash or name); ingest replaces a name by the content hash.",
    )
    frames: dict[str, list[dict[str, Scalar]]] | None = Field(
        None, description="Inline tables: name -> list of records (instead of a registered dataset)."
    )
    generated_code: str = Field(..., min_length=1, description="The code the model generated.")
    reference_code: str | None = Field(None, min_length=1, description="Code known to answer the question.")
    expected_result: Any = Field(
        None,
        description="The known answer: a scalar, a list of scalars, a list of records, or {columns, data}.",
    )
    recovery_attempts: list[RecoveryAttempt] | None = Field(
        None, max_length=MAX_RECOVERY_ATTEMPTS, description="The model's fixes after an error, in order."
    )
    order_matters: bool | None = Field(
        None, description="Whether row order is part of the answer; default: whether the question asks for an order."
    )

    @field_validator("frames")
    @classmethod
    def _frames(cls, frames: dict[str, list[dict[str, Any]]] | None) -> dict[str, list[dict[str, Any]]] | None:
        if frames is None:
            return None
        if not frames:
            raise ValueError("frames needs at least one table")
        for name, records in frames.items():
            if not TABLE_NAME.match(name):
                raise ValueError(f"table name {name!r} must be an identifier (letters, digits, underscore)")
            if name in RESERVED_NAMES:
                raise ValueError(f"table name {name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})")
            if len(records) > MAX_INLINE_ROWS:
                raise ValueError(f"table {name!r} has {len(records)} rows; inline tables hold at most {MAX_INLINE_ROWS}")
        return frames

    @field_validator("expected_result")
    @classmethod
    def _expected(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, dict):
            if set(value) != {"columns", "data"}:
                raise ValueError("an expected_result object must be {\"columns\": [...], \"data\": [[...], ...]}")
            columns, data = value["columns"], value["data"]
            if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
                raise ValueError("expected_result.columns must be a list of strings")
            if not isinstance(data, list) or not all(isinstance(r, list) and len(r) == len(columns) for r in data):
                raise ValueError("expected_result.data must be a list of rows, each as long as columns")
            for row in data:
                _check_scalars(row, "expected_result.data")
            return value
        if isinstance(value, list):
            if all(isinstance(v, dict) for v in value) and value:
                for record in value:
                    if not all(isinstance(k, str) for k in record):
                        raise ValueError("expected_result records need string keys")
                    _check_scalars(list(record.values()), "expected_result records")
                return value
            _check_scalars(value, "expected_result")
            return value
        raise ValueError("expected_result must be a scalar, a list, a list of records or {columns, data}")

    @field_validator("reference_code")
    @classmethod
    def _reference_parses(cls, code: str | None) -> str | None:
        if code is None:
            return None
        try:
            ast.parse(code)
        except (SyntaxError, ValueError) as exc:
            raise ValueError(f"reference_code does not parse: {exc}") from None
        return code

    @model_validator(mode="after")
    def _one_source(self) -> PandasItem:
        if (self.dataset is None) == (self.frames is None):
            raise ValueError("give exactly one of dataset (a registered dataset) or frames (inline tables)")
        return self

    @property
    def expected_result_given(self) -> bool:
        return self.expected_result is not None

    @property
    def final_code(self) -> str:
        """The code the model ended with: its last recovery attempt when there are any (issue 19.8).
        Correctness, quality, performance, understanding and coverage score it; the recovery
        component scores how the model got there."""
        return self.recovery_attempts[-1].code if self.recovery_attempts else self.generated_code

    @property
    def final_code_label(self) -> str:
        if self.recovery_attempts:
            return f"recovery attempt {len(self.recovery_attempts)}, the last"
        return "the generated code"


def _check_scalars(values: list[Any], where: str) -> None:
    for v in values:
        if not (v is None or isinstance(v, bool | int | float | str)):
            raise ValueError(f"{where} holds a {type(v).__name__}; only numbers, strings, booleans and null")


class PandasCodeReview(BaseModel):
    """The judge's review of one piece of generated pandas code."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(..., ge=0.0, le=1.0, description="0 = wrong or unusable, 1 = correct, idiomatic and efficient")
    reasoning: str = Field(..., description="Why this score: correctness, idiom, efficiency, robustness")
    issues: list[str] = Field(default_factory=list, description="Each concrete problem found, one per entry")


# --- metric registrations ----------------------------------------------------------------------------


def _weights(name: str, values: tuple[float, ...]) -> tuple[float, ...]:
    if any(v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
        raise CriteriaError(f"{name}: weights must be non-negative and add up to 1, got {list(values)}")
    return values


@metric("pandas.prompt_understanding", version=2, kinds=(KIND_NAME,))
def prompt_understanding(column_extraction: float = 0.4, nl_parsing: float = 0.3, statistical: float = 0.3) -> Any:
    weights = _weights("pandas.prompt_understanding", (column_extraction, nl_parsing, statistical))

    def score(item: PandasItem, ctx: MetricContext) -> ComponentResult:
        return m.prompt_understanding(item, ctx, weights)  # type: ignore[arg-type]

    return score


@metric("pandas.requirement_coverage", version=2, kinds=(KIND_NAME,))
def requirement_coverage(filters: float = 0.3, groupby: float = 0.3, sorting: float = 0.2, joins: float = 0.2) -> Any:
    weights = _weights("pandas.requirement_coverage", (filters, groupby, sorting, joins))

    def score(item: PandasItem, ctx: MetricContext) -> ComponentResult:
        return m.requirement_coverage(item, ctx, weights)  # type: ignore[arg-type]

    return score


@metric("pandas.error_recovery", version=2, kinds=(KIND_NAME,))
def error_recovery(max_attempts: int = 2, success_rate: float = 0.5, fix_quality: float = 0.3, attempts_made: float = 0.2) -> Any:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= MAX_RECOVERY_ATTEMPTS:
        raise CriteriaError(f"pandas.error_recovery: max_attempts must be an integer in 1..{MAX_RECOVERY_ATTEMPTS}")
    weights = _weights("pandas.error_recovery", (success_rate, fix_quality, attempts_made))

    def score(item: PandasItem, ctx: MetricContext) -> ComponentResult:
        return m.error_recovery(item, ctx, max_attempts, weights)  # type: ignore[arg-type]

    return score


@metric("pandas.correctness", version=2, kinds=(KIND_NAME,))
def correctness(rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> Any:
    if not (0 <= rel_tol < 1 and 0 <= abs_tol):
        raise CriteriaError("pandas.correctness: rel_tol must be in [0, 1) and abs_tol non-negative")
    tol = Tolerance(rel_tol, abs_tol)

    def score(item: PandasItem, ctx: MetricContext) -> ComponentResult:
        return m.correctness(item, ctx, tol)

    return score


@metric("pandas.code_quality", version=2, kinds=(KIND_NAME,))
def code_quality() -> Any:
    def score(item: PandasItem, ctx: MetricContext) -> ComponentResult:
        return m.code_quality(item, ctx)

    return score


@metric("pandas.performance", version=2, kinds=(KIND_NAME,))
def performance(time_weight: float = 0.7, time_floor_ms: float = 50.0, memory_floor_mb: float = 32.0) -> Any:
    if not 0 <= time_weight <= 1 or time_floor_ms < 0 or memory_floor_mb < 0:
        raise CriteriaError("pandas.performance: time_weight in [0, 1], floors non-negative")
    bands = {"time_weight": time_weight, "time_floor_ms": time_floor_ms, "memory_floor_mb": memory_floor_mb}

    def score(item: PandasItem, ctx: MetricContext) -> ComponentResult:
        return m.performance(item, ctx, **bands)

    return score


# --- the judge ---------------------------------------------------------------------------------------


def _describe_tables(item: PandasItem) -> str:
    if item.frames:
        parts = []
        for name, records in item.frames.items():
            columns = list(dict.fromkeys(k for r in records for k in r))
            sample = json.dumps(records[:3], default=str)
            parts.append(f"{name}: {len(records)} rows; columns {', '.join(columns)}; first rows {sample}")
        return "\n".join(parts)
    try:
        from assay.scoring.pandas.execution import _store_loader

        tables = _store_loader(item.dataset or "")
        lines = []
        for name, table in tables.items():
            header = table.data.split(b"\n", 1)[0].decode(errors="replace")[:500] if table.format == "csv" else f"({table.format})"
            lines.append(f"{name}: {header}")
        return f"registered dataset {item.dataset}\n" + "\n".join(lines)
    except Exception:  # noqa: BLE001 - a description, not a requirement
        return f"registered dataset {item.dataset}"


def _judge_inputs(item: PandasItem) -> dict[str, str]:
    return {
        "QUESTION": item.question,
        "TABLES": _describe_tables(item),
        "GENERATED_CODE": item.final_code,
        "REFERENCE_CODE": item.reference_code or "(none given)",
        "EXPECTED_RESULT": json.dumps(item.expected_result, default=str) if item.expected_result_given else "(none given)",
    }


def _verdict_score(verdict: PandasCodeReview) -> tuple[float, dict[str, Any]]:
    return verdict.score, {"reasoning": verdict.reasoning, "issues": verdict.issues}


KIND = Kind(
    name=KIND_NAME,
    item_model=PandasItem,
    judge_inputs=_judge_inputs,  # type: ignore[arg-type]
    report_row=pandas_report_row,
)

register_verdict("pandas_review", PandasCodeReview, _verdict_score)
