"""bench/cost.py's long generic rubric: over 2,000 tokens of fixed text, all of it before the first
per-item placeholder (so all of it lands in the cached system prompt), and the benchmark's realtime
lane reads nearly all of it from the prompt cache after the first judgment."""

from __future__ import annotations

import asyncio

from assay.scoring.judge.rubrics import fixed_text_after_first_placeholder
from assay.scoring.kinds import get_kind
from assay.scoring.pipeline.components import cache_read_ratio
from assay.scoring.pipeline.scorer import render_judge_prompt
from assay.scoring.suites.loader import load_model_catalog
from bench import cost
from tests.fakes.anthropic_server import CHARS_PER_TOKEN, FakeAnthropic


def test_the_long_rubric_is_long_and_cache_first():
    suite = cost.bench_suite("long_rubric")
    criteria = suite.criteria
    assert criteria.kind == "generic" and len(criteria.judge_components) == 1
    judge = criteria.judge_for(criteria.judge_components[0])
    assert len(fixed_text_after_first_placeholder(judge.template).strip()) < 80  # only section labels

    catalog = load_model_catalog(cost.CONFIG)
    kind = get_kind("generic")
    items = [kind.item_model.model_validate(raw) for raw in cost.generic_items(3)]
    assert len({item.id for item in items}) == 3
    prompts = [render_judge_prompt(criteria, judge.component, kind, item, catalog)[0] for item in items]
    assert len(prompts[0].system) // CHARS_PER_TOKEN >= 2000
    assert len(prompts[0].system) // CHARS_PER_TOKEN >= catalog.models[judge.model].min_cacheable_tokens
    assert {p.system for p in prompts} == {prompts[0].system}  # one cached prefix for every item
    assert len({p.user for p in prompts}) == 3


def test_the_realtime_lane_reads_the_rubric_from_the_cache():
    suite = cost.bench_suite("long_rubric")
    catalog = load_model_catalog(cost.CONFIG)
    kind = get_kind("generic")
    items = [kind.item_model.model_validate(raw) for raw in cost.generic_items(10)]
    with FakeAnthropic() as fake:
        lane = asyncio.run(cost.realtime_lane(suite, items, catalog, fake.base_url))
    assert lane.judgments == lane.verdicts == 10
    assert lane.usage["cache_creation_input_tokens"] > 0  # written once
    assert cache_read_ratio(lane.usage) > 0.8
