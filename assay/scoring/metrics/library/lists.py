"""F1 between a list in the output and a reference list (e.g. the tools an agent called)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Literal

from pydantic import Field, field_validator

from assay.scoring.metrics.library._common import (
    EXPECTED,
    KINDS,
    Args,
    as_text,
    canonical,
    output_json,
)
from assay.scoring.metrics.library.json_checks import lookup, parse_path
from assay.scoring.metrics.registry import (
    BadItemValue,
    ComponentResult,
    ItemRef,
    Metric,
    MetricContext,
    metric,
    resolve_arg,
)


class ListF1Args(Args):
    expected: list[Any] | ItemRef = Field(
        EXPECTED, description="the reference list, or a per-item value holding one (a string is read as a JSON list)"
    )
    path: str | None = Field(None, description="where the list is in the output JSON (a.b[0].c); default: the whole output")
    mode: Literal["set", "list"] = Field("set", description="set: duplicates ignored; list: each copy counts (order never counts)")
    case_sensitive: bool = Field(True, description="false: strings compare case-insensitively")

    @field_validator("path")
    @classmethod
    def _valid_path(cls, path: str | None) -> str | None:
        if path is not None:
            parse_path(path)
        return path


def _reference(args: ListF1Args, item: Any) -> list[Any]:
    value = resolve_arg(args.expected, item)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadItemValue(f"{args.expected} must be a JSON list: {exc}") from exc
    if not isinstance(value, list):
        raise BadItemValue(f"{args.expected} must be a list, got {as_text(value)[:200]}")
    return value


def _output_list(args: ListF1Args, item: Any) -> tuple[list[Any] | None, str]:
    value, error = output_json(item)
    if error:
        return None, error
    if args.path is not None:
        found, value, why = lookup(value, parse_path(args.path))
        if not found:
            return None, f"path {args.path}: {why}"
    if not isinstance(value, list):
        return None, f"{'the value at ' + args.path if args.path else 'the output'} is not a list"
    return value, ""


@metric("list_f1", version=1, kinds=KINDS, args_model=ListF1Args)
def list_f1(args: ListF1Args) -> Metric:
    """F1 of the output list against the reference list: precision = matched / output elements,
    recall = matched / reference elements. Two empty lists score 1; an output that is not a list
    scores 0 (``error`` in the details). ``missing`` and ``extra`` list the unmatched elements."""

    def key(element: Any) -> str:
        if isinstance(element, str) and not args.case_sensitive:
            element = element.casefold()
        return canonical(element)

    def counts(elements: list[Any]) -> tuple[Counter[str], dict[str, Any]]:
        keyed = Counter(key(e) for e in elements)
        if args.mode == "set":
            keyed = Counter(dict.fromkeys(keyed, 1))
        return keyed, {key(e): e for e in elements}

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        reference = _reference(args, item)
        output, error = _output_list(args, item)
        if output is None:
            return ComponentResult.ok(0.0, {"error": error})
        got, got_values = counts(output)
        want, want_values = counts(reference)
        matched = sum((got & want).values())
        n_got, n_want = sum(got.values()), sum(want.values())
        precision = matched / n_got if n_got else float(n_want == 0)
        recall = matched / n_want if n_want else float(n_got == 0)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        details = {
            "precision": precision,
            "recall": recall,
            "missing": [want_values[k] for k in (want - got).elements()],
            "extra": [got_values[k] for k in (got - want).elements()],
        }
        return ComponentResult.ok(f1, details)

    return score
