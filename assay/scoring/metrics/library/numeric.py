"""A number in the output within a tolerance of the reference."""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import Field, FiniteFloat, model_validator

from assay.scoring.metrics.library._common import EXPECTED, KINDS, Args, as_text
from assay.scoring.metrics.registry import (
    BadItemValue,
    ComponentResult,
    ItemRef,
    Metric,
    MetricContext,
    metric,
    resolve_arg,
)

# A decimal number, optionally signed, with optional thousands separators and exponent. A number
# glued to a preceding letter or dot ("area51", "v2.1") is not an answer and is not taken.
_NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_WHOLE = re.compile(_NUMBER)
_ANYWHERE = re.compile(r"(?<![\w.])" + _NUMBER)


def _to_float(token: str) -> float:
    return float(token.replace(",", ""))


def parse_number(value: Any) -> tuple[float | None, str]:
    """The number a value states, and how it was read: a JSON number as is; text that is one
    number; otherwise the last number in the text (answers usually end with the result)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value), "number") if math.isfinite(value) else (None, "not a finite number")
    text = as_text(value).strip()
    if _WHOLE.fullmatch(text):
        return _to_float(text), "whole output"
    numbers = _ANYWHERE.findall(text)
    if not numbers:
        return None, "no number in the output"
    return _to_float(numbers[-1]), f"last of {len(numbers)} numbers" if len(numbers) > 1 else "only number"


class NumericCloseArgs(Args):
    value: FiniteFloat | ItemRef = Field(EXPECTED, description="the reference number; default: the item's expected")
    abs_tol: FiniteFloat | None = Field(None, ge=0, description="largest allowed |output - value|")
    rel_tol: FiniteFloat | None = Field(None, ge=0, description="largest allowed difference relative to the larger magnitude")

    @model_validator(mode="after")
    def _some_tolerance(self) -> NumericCloseArgs:
        if self.abs_tol is None and self.rel_tol is None:
            raise ValueError("give abs_tol, rel_tol or both (0 for an exact match)")
        return self


def _reference(args: NumericCloseArgs, item: Any) -> float:
    wanted = resolve_arg(args.value, item)
    if isinstance(wanted, bool) or not isinstance(wanted, (int, float, str)):
        raise BadItemValue(f"{args.value} must be a number, got {as_text(wanted)[:200]}")
    number = float(wanted) if not isinstance(wanted, str) else (_to_float(wanted.strip()) if _WHOLE.fullmatch(wanted.strip()) else None)
    if number is None or not math.isfinite(number):
        raise BadItemValue(f"{args.value} must be a number, got {as_text(wanted)[:200]!r}")
    return number


@metric("numeric_close", version=1, kinds=KINDS, args_model=NumericCloseArgs)
def numeric_close(args: NumericCloseArgs) -> Metric:
    """1 when the number in the output is within tolerance of ``value`` (``math.isclose``: within
    ``abs_tol``, or within ``rel_tol`` times the larger magnitude), else 0. An output with no
    number scores 0 (``error`` in the details)."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        reference = _reference(args, item)
        number, read_as = parse_number(getattr(item, "output", None))
        if number is None:
            return ComponentResult.ok(0.0, {"error": read_as, "expected": reference})
        close = math.isclose(number, reference, rel_tol=args.rel_tol or 0.0, abs_tol=args.abs_tol or 0.0)
        details = {"number": number, "read_as": read_as, "expected": reference, "difference": abs(number - reference)}
        return ComponentResult.ok(1.0 if close else 0.0, details)

    return score
