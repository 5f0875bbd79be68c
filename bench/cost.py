"""Judge cost: cache-read ratio and billed-token equivalents per judgment, batch lane vs realtime.

For four suites, alert_session (the EP's prompt as written: a long static rubric in the cached system
prompt, but its task checklist, reminders and output schema after the session, uncached),
alert_session_cached (the same words, verdict and component laid out cache-first: every fixed part
before the session), kql (a short prefix, below its model's minimum cacheable length) and long_rubric
(bench/suites/long_rubric.yaml: a generic suite's rubric judge with four weighted criteria and their
evaluation steps, ~2,000+ tokens of fixed text laid out cache-first), the same N distinct items are
judged twice on
the in-thread fake Anthropic API (tests/fakes/anthropic_server.py), each lane starting from a cold
prompt cache (the fake is reset in between):

1. realtime lane: one ``run_judge`` call per item, the JudgeRequest built as the judge worker builds
   it (``assay.scoring.pipeline.scorer._judge``), with an in-process breaker and governor;
2. batch lane: the same requests as one Message Batch through ``AnthropicBatches`` (line, submit, poll,
   collect: what ``assay.scoring.rescoring.batch_lane`` calls), its results read and priced as
   ``batch_lane.apply_results`` does (``cost_usd(usage) * batch_discount``).

Printed per suite and lane: mean tokens per judgment (input, cache write, cache read, output), the
cache-read ratio (``pipeline.cache_read_ratio``), dollars per judgment, billed input-token equivalents
(dollars / the model's input price per token) and the batch/realtime cost ratio; then, per lane, each
``*_cached`` suite's read ratio and $ per judgment beside those of the suite it re-lays out. The fake
counts tokens as characters / 4 and keeps a prompt cache its own way (see the notes printed below the
table), so the ratios are the meaningful figures, not the absolute ones.

    .venv/bin/python -m bench.cost [--items 50] [--suites alert_session,alert_session_cached,kql,long_rubric]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from assay.scoring.judge.breaker import InProcessBreaker
from assay.scoring.judge.governor import InProcessGovernor, RateLimits
from assay.scoring.judge.providers.anthropic_messages import (
    AnthropicBatches,
    AnthropicProvider,
    make_batch_client,
    make_client,
)
from assay.scoring.judge.providers.base import Call
from assay.scoring.judge.service import JudgeRequest, read_answer, run_judge
from assay.scoring.kinds import get_kind
from assay.scoring.pipeline.components import cache_read_ratio
from assay.scoring.pipeline.scorer import judge_inputs_for, render_judge_prompt
from assay.scoring.pricing import USAGE_FIELDS, cost_usd
from assay.scoring.suites.catalog import ModelCatalog, ModelPrice
from assay.scoring.suites.loader import Suite, load_model_catalog, load_suite, parse_suite
from bench import harness
from tests.fakes.anthropic_server import CHARS_PER_TOKEN, FakeAnthropic

CONFIG = harness.REPO / "config"
EXAMPLES = harness.REPO / "examples"
# Suites kept with the benchmarks (not installed), by the name --suites gives them.
BENCH_SUITES = {"long_rubric": Path(__file__).resolve().parent / "suites" / "long_rubric.yaml"}


# --- items -----------------------------------------------------------------------------------------


def session_items(n: int) -> list[dict[str, Any]]:
    """N distinct completed alert sessions made from examples/sessions.jsonl: own ids, own alert data."""
    examples = [json.loads(line) for line in (EXAMPLES / "sessions.jsonl").read_text().splitlines() if line.strip()]
    completed = [e for e in examples if e.get("status") == "completed"]
    items = []
    for i in range(n):
        item = json.loads(json.dumps(completed[i % len(completed)]))
        item["session_id"] = f"{item['session_id']}-bench-{i}"
        item["alert_data"] = {**item["alert_data"], "bench_occurrence": i}
        if item.get("final_analysis"):
            item["final_analysis"] = f"{item['final_analysis']} (occurrence #{i})"
        items.append(item)
    return items


def kql_items(n: int) -> list[dict[str, Any]]:
    """N distinct KQL items made from examples/kql_items.jsonl (the prompt text varies), as the
    throughput benchmarks make them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = harness.write_items(Path(tmp) / "items.jsonl", n)
        return [json.loads(line) for line in path.read_text().splitlines()]


def generic_items(n: int) -> list[dict[str, Any]]:
    """N distinct generic RAG items made from examples/generic/rag.jsonl (own ids, the question varies)."""
    lines = (EXAMPLES / "generic" / "rag.jsonl").read_text().splitlines()
    examples = [json.loads(line) for line in lines if line.strip()]
    items = []
    for i in range(n):
        item = dict(examples[i % len(examples)])
        item["id"] = f"{item['id']}-bench-{i}"
        item["input"] = f"{item['input']} (ticket #{i})"
        items.append(item)
    return items


def bench_suite(name: str) -> Suite:
    """An installed suite from config/suites/, or one of the benchmark's own suite files."""
    path = BENCH_SUITES.get(name)
    if path is None:
        return load_suite(CONFIG, name, env=os.environ)
    return parse_suite(path.read_text(), config_dir=CONFIG, env=os.environ, source=str(path), origin="path")


# --- the two lanes ---------------------------------------------------------------------------------


@dataclass
class Lane:
    judgments: int = 0
    verdicts: int = 0
    calls: int = 0
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_FIELDS, 0))
    cost: float = 0.0
    seconds: float = 0.0

    def add(self, usage: dict[str, int], cost: float) -> None:
        for name in USAGE_FIELDS:
            self.usage[name] += usage.get(name, 0)
        self.cost += cost


async def realtime_lane(suite: Suite, items: list[BaseModel], catalog: ModelCatalog, base_url: str) -> Lane:
    """One ``run_judge`` after another, as the judge worker runs them (on an event loop)."""
    criteria = suite.criteria
    judge = criteria.judge_for(criteria.judge_components[0])
    kind = get_kind(criteria.kind)
    price = catalog.models[judge.model]
    client = make_client("bench", base_url, suite.options.judge.timeout_seconds)
    breaker = InProcessBreaker()
    governor = InProcessGovernor(
        {name: RateLimits(m.requests_per_minute, m.input_tokens_per_minute) for name, m in catalog.models.items()}
    )
    lane = Lane()
    started = time.perf_counter()
    for item in items:
        inputs, _ = judge_inputs_for(criteria, judge.component, kind, item, catalog)
        outcome = await run_judge(
            JudgeRequest(
                model=judge.model,
                max_tokens=judge.max_tokens,
                timeout_seconds=suite.options.judge.timeout_seconds,
                prompt_template=judge.template,
                inputs=inputs,
                verdict_model=judge.verdict.model,
            ),
            provider=AnthropicProvider("anthropic", client),
            breaker=breaker,
            governor=governor,
            price=price,
        )
        lane.judgments += 1
        lane.verdicts += outcome.verdict is not None
        lane.calls += outcome.calls
        lane.add(outcome.usage, outcome.cost_usd)
    lane.seconds = time.perf_counter() - started
    await client.close()
    return lane


def batch_lane(suite: Suite, items: list[BaseModel], catalog: ModelCatalog, base_url: str) -> Lane:
    criteria = suite.criteria
    judge = criteria.judge_for(criteria.judge_components[0])
    kind = get_kind(criteria.kind)
    price = catalog.models[judge.model]
    verdict = judge.verdict.model
    client = make_batch_client("bench", base_url, 60)
    api = AnthropicBatches("anthropic", client)
    lines = []
    for i, item in enumerate(items):
        prompt, _ = render_judge_prompt(criteria, judge.component, kind, item, catalog)
        messages = [{"role": "user", "content": prompt.user}]
        # The request batch_lane.prepare sends: the provider's own line for the judge's call.
        lines.append(api.line(f"{suite.name}-{i}", Call(judge.model, prompt, messages, judge.max_tokens, 0.0, verdict, judge.parameters)))

    lane = Lane()
    started = time.perf_counter()
    provider_id = api.submit(lines)
    while not api.poll(provider_id).ended:
        time.sleep(0.1)
    for result in api.collect(provider_id):
        lane.judgments += 1
        if result.answer is None:
            continue  # the batch lane would send it realtime; the fake is not scripted to fail any
        usage = result.answer.usage
        lane.calls += 1
        lane.add(usage, cost_usd(usage, price) * price.batch_discount)  # as apply_results prices it
        _, answer, _ = read_answer(result.answer, verdict, judge.max_tokens)
        lane.verdicts += answer is not None
    lane.seconds = time.perf_counter() - started
    client.close()
    return lane


# --- what the API would bill when the prefix is too short to cache -----------------------------------


def as_api_bills(lane: Lane, price: ModelPrice, cacheable: bool) -> Lane:
    """The lane's usage as the API splits it when the marked prefix is below the model's minimum
    cacheable length (the API then caches nothing and bills every prompt token as input); the fake
    does not apply that minimum. Identity when the prefix is cacheable."""
    if cacheable:
        return lane
    usage = dict(lane.usage)
    usage["input_tokens"] += usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
    usage["cache_creation_input_tokens"] = usage["cache_read_input_tokens"] = 0
    discount = lane.cost / cost_usd(lane.usage, price) if lane.cost else 1.0  # 1 realtime, batch_discount batch
    return Lane(lane.judgments, lane.verdicts, lane.calls, usage, cost_usd(usage, price) * discount, lane.seconds)


# --- the report ------------------------------------------------------------------------------------

HEADER = (
    f"{'suite / lane':<34}{'judgm.':>7}{'input':>9}{'c.write':>9}{'c.read':>9}{'output':>8}"
    f"{'read ratio':>11}{'$/judgment':>12}{'billed in-tok eq':>18}{'batch/rt $':>11}"
)


def row(label: str, lane: Lane, price: ModelPrice, realtime_cost: float | None) -> str:
    n = lane.judgments or 1
    mean = {k: v / n for k, v in lane.usage.items()}
    ratio = cache_read_ratio(lane.usage)
    per = lane.cost / n
    equivalents = per / (price.input_per_mtok / 1_000_000)
    versus = f"{lane.cost / realtime_cost:.3f}" if realtime_cost else "-"
    return (
        f"{label:<34}{lane.judgments:>7}{mean['input_tokens']:>9.0f}{mean['cache_creation_input_tokens']:>9.0f}"
        f"{mean['cache_read_input_tokens']:>9.0f}{mean['output_tokens']:>8.0f}"
        f"{(f'{100 * ratio:.1f}%' if ratio is not None else '-'):>11}{per:>12.6f}{equivalents:>18.0f}{versus:>11}"
    )


CACHED_SUFFIX = "_cached"


def beside_uncached(lanes: dict[str, tuple[Lane, Lane]]) -> list[str]:
    """For every ``X_cached`` suite run together with ``X``: per lane, both read ratios and $ per
    judgment, and the cached layout's cost as a share of the original's."""
    lines = []
    for name, pair in lanes.items():
        original = name.removesuffix(CACHED_SUFFIX)
        if original == name or original not in lanes:
            continue
        for lane_name, cached, before in zip(("realtime", "batch"), pair, lanes[original]):
            ratio_before, ratio_after = cache_read_ratio(before.usage), cache_read_ratio(cached.usage)
            per_before = before.cost / (before.judgments or 1)
            per_after = cached.cost / (cached.judgments or 1)
            lines.append(
                f"{name} vs {original}, {lane_name}: read ratio {_percent(ratio_after)} vs {_percent(ratio_before)};"
                f" $/judgment {per_after:.6f} vs {per_before:.6f}"
                f" ({f'{per_after / per_before:.3f}x' if per_before else '-'})"
            )
    return lines


def _percent(ratio: float | None) -> str:
    return f"{100 * ratio:.1f}%" if ratio is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=50, help="judgments per suite and lane")
    parser.add_argument(
        "--suites",
        default="alert_session,alert_session_cached,kql,long_rubric",
        help=f"comma-separated suite names: installed suites, or the benchmark's own ({', '.join(BENCH_SUITES)})",
    )
    args = parser.parse_args()

    catalog = load_model_catalog(CONFIG)
    makers = {
        "alert_session": session_items,
        "alert_session_cached": session_items,
        "kql": kql_items,
        "long_rubric": generic_items,
    }
    lines: list[str] = []
    lanes: dict[str, tuple[Lane, Lane]] = {}
    checks: list[str] = []
    with FakeAnthropic(batch_processing_seconds=0.2) as fake:
        for name in args.suites.split(","):
            suite = bench_suite(name)
            judge = suite.criteria.judge_for(suite.criteria.judge_components[0])
            kind = get_kind(suite.criteria.kind)
            price = catalog.models[judge.model]
            items = [kind.item_model.model_validate(raw) for raw in makers[name](args.items)]
            prompt, _ = render_judge_prompt(suite.criteria, judge.component, kind, items[0], catalog)
            prefix = len(prompt.system) // CHARS_PER_TOKEN  # as the fake counts it
            cacheable = prefix >= price.min_cacheable_tokens

            fake.reset()  # a cold cache for each lane
            realtime = asyncio.run(realtime_lane(suite, items, catalog, fake.base_url))
            fake.reset()
            batch = batch_lane(suite, items, catalog, fake.base_url)
            lanes[name] = (realtime, batch)

            lines.append(
                f"{name}: {judge.model} (${price.input_per_mtok:g} in / ${price.output_per_mtok:g} out /"
                f" ${price.cache_write_per_mtok:g} cache write / ${price.cache_read_per_mtok:g} cache read per MTok,"
                f" batch x{price.batch_discount:g}); cached prefix ~{prefix} tokens,"
                f" minimum cacheable {price.min_cacheable_tokens}: {'cacheable' if cacheable else 'NOT cacheable'}"
            )
            lines.append(row(f"{name} realtime", realtime, price, None))
            lines.append(row(f"{name} batch", batch, price, realtime.cost))
            if not cacheable:
                api_rt, api_batch = as_api_bills(realtime, price, False), as_api_bills(batch, price, False)
                lines.append(row(f"{name} realtime (API)*", api_rt, price, None))
                lines.append(row(f"{name} batch (API)*", api_batch, price, api_rt.cost))
            checks.append(
                f"{name}: realtime {realtime.verdicts}/{realtime.judgments} verdicts in {realtime.calls} calls"
                f" ({realtime.seconds:.1f} s); batch {batch.verdicts}/{batch.judgments} verdicts"
                f" ({batch.seconds:.1f} s)"
            )

    print(f"judgments per suite and lane: {args.items}; each lane starts with a cold prompt cache")
    print(HEADER)
    for line in lines:
        print(line)
    side_by_side = beside_uncached(lanes)
    if side_by_side:
        print()
        for line in side_by_side:
            print(line)
    print()
    for line in checks:
        print(line)
    print(
        "\nMean tokens per judgment. read ratio = cache read / (input + cache write + cache read).\n"
        "billed in-tok eq = $/judgment / the model's input price per token: the plain input tokens a\n"
        "judgment costs as much as (output tokens included).\n"
        "The fake counts tokens as characters / 4 (not the real tokenizer), and models the cache as\n"
        "follows: the system blocks up to the last cache_control mark are the prefix; the first call\n"
        "with a given (model, prefix) writes it, every later one reads it (no 5-minute expiry, no\n"
        "concurrent misses). A batch is answered in submission order through the same code, so its\n"
        "first request writes and the rest read; the real batch API gives cache hits best-effort only.\n"
        "One cache write is spread over the N judgments of a lane, so read ratio rises with N.\n"
        "* The fake ignores the minimum cacheable length: it caches a marked prefix of any size. The\n"
        "  (API) rows fold those cache tokens back into input, as the API bills a prefix below the\n"
        "  model's minimum (nothing cached). Absolute figures are the fake's; the ratios matter."
    )


if __name__ == "__main__":
    main()
