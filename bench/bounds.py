"""Bounded work per item (issue 29): the CPU time each input of the security review costs now, on
the path it took then, measured on a second run (a running process has its imports and caches).
Prints figures; asserts nothing. Goal: at most 1 s each (refused or done).

    .venv/bin/python -m bench.bounds
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from assay.scoring.suites.api_suites import parse_body
from pydantic import BaseModel

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds.generic import GenericItem, prepare_judge
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import ComponentResult, MetricContext
from assay.settings import get_settings

REPO = Path(__file__).resolve().parent.parent
CTX = MetricContext(now=datetime(2026, 1, 1, tzinfo=UTC))
TEMPLATE = "Grade the answer.\n{{OUTPUT_SCHEMA}}\nQ: {{input}}\nA: {{output}}\nContext:\n{{context}}"


class _Verdict(BaseModel):
    score: float


def cpu(run: Callable[[], Any]) -> tuple[float, Any]:
    started = time.process_time()
    outcome = run()
    return time.process_time() - started, outcome


def metric(name: str, args: dict[str, Any], **item: Any) -> Callable[[], ComponentResult]:
    built = build_metric(name, 1, args, "generic")
    return lambda: built(GenericItem(input="q", **item), CTX)


def judge_context() -> str:
    item = GenericItem(input="q", output="a", context=[""] * 72_000)  # 288 KB as JSON
    _, details = prepare_judge(
        item, template=TEMPLATE, verdict_model=_Verdict, model="m", max_tokens=1_024, context_window=100_000
    )
    record = details["judge_input"]
    return f"kept {record['passages_kept']:,} of {record['passages_total']:,} passages"


def suite_body(text: str) -> Callable[[], str]:
    def run() -> str:
        try:
            suite = parse_body(text.encode(), "yaml", get_settings().config_dir)
        except CriteriaError as exc:
            return f"422: {exc.message[:110]}"
        return f"valid: {suite.name} ({len(text):,} bytes)"

    return run


def large_valid_suite() -> str:
    """A generic suite at about the 1 MiB body cap that is valid: five long rubrics, many metrics."""
    base = yaml.safe_load((REPO / "examples" / "generic" / "correctness.yaml").read_text())["components"]["correctness"]
    components: dict[str, Any] = {
        f"rubric_{n}": {**base, "weight": 0.1, "judge": {**base["judge"], "rubric": f"Rubric {n}: " + "grade it well. " * 12_500}}
        for n in range(5)
    }
    contains = {"weight": 0.002, "metric": "contains", "version": 1}
    components.update({f"has_{n}": {**contains, "args": {"value": f"word {n}"}} for n in range(250)})
    suite = {"name": "bench_bounds", "kind": "generic", "threshold": 0.5, "components": components}
    return yaml.safe_dump(json.loads(json.dumps(suite)))  # copies: no shared value dumped as an alias


def cases() -> list[tuple[str, Callable[[], Any]]]:
    suite = yaml.safe_dump({"name": "bench_bounds", "kind": "generic", "components": {"c": {"metric": "is_json"}}})
    many = suite + "extra: [" + "1, " * 340_000 + "]\n"  # ~1 MiB of values
    return [
        ("judge: 72,000 empty passages fitted to the window", judge_context),
        (
            "rouge_l: 20 references x 2,000 tokens vs 2,000",
            metric("rouge_l", {"reference": ["word " * 2_000] * 20}, output="word " * 2_000),
        ),
        (
            "json_schema uniqueItems: 4,000 objects",
            metric("json_schema", {"schema": {"type": "array", "uniqueItems": True}}, output=json.dumps([{"n": n} for n in range(4_000)])),
        ),
        (
            "regex_match: 5 KB per-item pattern, 200 KB output",
            metric("regex_match", {"pattern": {"from": "metadata.p"}}, output="abcdefghij" * 20_000, metadata={"p": "[a-j]{1,1000}" * 400}),
        ),
        (
            "regex_match: 66-char pattern, 10,000-step program, 200 KB",
            metric("regex_match", {"pattern": "[a-j]{1,1000}" * 5 + "k"}, output="abcdefghij" * 20_000),
        ),
        ("suite body: ~1 MiB valid generic suite", suite_body(large_valid_suite())),
        ("suite body: ~1 MiB of values", suite_body(many)),
        ("suite body: a 5,000-digit integer", suite_body(suite + "extra: " + "7" * 5_000 + "\n")),
        ("suite body: a base-60 integer 1:0:0:... (40 KB)", suite_body(suite + "extra: 1" + ":0" * 20_000 + "\n")),
    ]


def main() -> None:
    for label, run in cases():
        run()  # warm: imports and caches are what a running worker or API process already has
        seconds, outcome = cpu(run)
        if isinstance(outcome, ComponentResult):
            outcome = outcome.reason if outcome.reason else f"{outcome.status} {outcome.score}"
        print(f"{label:<58} {seconds:7.3f} s CPU  {str(outcome)[:150]}")


if __name__ == "__main__":
    main()
