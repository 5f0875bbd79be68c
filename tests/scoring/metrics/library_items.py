"""Helpers for the metric library tests: an item of the generic kind's shape, and one-call scoring."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from assay.scoring.errors import CriteriaError
from assay.scoring.metrics.catalog import build_metric, check_component_metric
from assay.scoring.metrics.registry import ComponentResult, MetricContext

CTX = MetricContext(now=datetime(2026, 1, 1, tzinfo=UTC))


class Item(BaseModel):
    """The generic item's shape; the library reads attributes by name, so this stands in for it."""

    input: str = "the question"
    output: Any = ""
    expected: str | None = None
    context: str | list[str] | None = None
    metadata: dict[str, Any] | None = None


def score(metric: str, args: dict[str, Any] | None = None, **item: Any) -> ComponentResult:
    return build_metric(metric, 1, args or {}, "generic")(Item(**item), CTX)


def args_error(metric: str, args: dict[str, Any]) -> str:
    """The message a suite gets for a component ``comp`` with these args."""
    with pytest.raises(CriteriaError) as caught:
        check_component_metric("comp", metric, 1, args, "generic")
    return caught.value.message
