"""Scoring helpers for the pandas tests and ``bench.validity_pandas``: build the suite's metrics, total
an item and decide its pass the way the pipeline does (weights renormalised over the components that
scored; a pass needs the threshold and no pass blocker of the kind)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from assay.scoring.kinds import get_kind
from assay.scoring.kinds.pandas_codegen import PandasItem
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import ComponentResult, MetricContext
from assay.scoring.pipeline.finalize import component_pass_blockers
from assay.scoring.suites.loader import Suite, parse_suite

REPO = Path(__file__).resolve().parents[3]
SUITE_FILE = Path(os.environ.get("ASSAY_TEST_PANDAS_SUITE", REPO / "config" / "suites" / "pandas_codegen.yaml"))
CTX = MetricContext(now=datetime(2024, 1, 1, tzinfo=timezone.utc))


def load_pandas_suite() -> Suite:
    return parse_suite(SUITE_FILE.read_text(), config_dir=REPO / "config", env={}, source=str(SUITE_FILE))


@dataclass
class Scored:
    total: float | None
    components: dict[str, ComponentResult]
    passed: bool = False
    blockers: tuple[str, ...] = ()

    def score(self, name: str) -> float | None:
        return self.components[name].score


def score_item(raw: dict[str, Any], suite: Suite | None = None, ctx: MetricContext = CTX) -> Scored:
    suite = suite or load_pandas_suite()
    item = PandasItem.model_validate(raw)
    components: dict[str, ComponentResult] = {}
    for name, spec in suite.criteria.components.items():
        if spec.judge:
            continue
        metric = build_metric(spec.metric, spec.version, spec.args, "pandas_codegen")
        components[name] = metric(item, ctx)
    weights = {n: s.weight for n, s in suite.criteria.components.items() if not s.judge}
    ok = {n: c for n, c in components.items() if c.status == "ok"}
    if any(c.status == "failed" for c in components.values()) or not ok:
        return Scored(None, components)
    total = sum(c.score * weights[n] for n, c in ok.items()) / sum(weights[n] for n in ok)  # type: ignore[operator]
    kind = get_kind("pandas_codegen")
    item_blockers = kind.pass_blockers(item) if kind.pass_blockers is not None else []
    named = [SimpleNamespace(component=n, status=c.status, details=c.details) for n, c in components.items()]
    blockers = tuple(dict.fromkeys([*item_blockers, *component_pass_blockers(named)]))
    passed = total >= suite.criteria.threshold - 1e-12 and not blockers
    return Scored(total, components, passed, blockers)
