"""alert_session_cached (issue 22): the EP-0028 prompt's own words, verdict and component laid out
cache-first, as a suite of its own so that alert_session's hash and stored scores stay current."""

from __future__ import annotations

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import asyncio

from assay.scoring.judge.prompt import OUTPUT_SCHEMA, PLACEHOLDER, output_schema_text, template_placeholders
from assay.scoring.judge.rubrics import fixed_text_after_first_placeholder
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.alert_session import JudgeOutputSchema, render_alert, render_conversation
from assay.scoring.pipeline.components import cache_read_ratio
from assay.scoring.pipeline.scorer import render_judge_prompt
from assay.scoring.suites.loader import list_suite_names, load_model_catalog, load_suite
from bench import cost
from tests.conftest import REPO
from tests.fakes.anthropic_server import FakeAnthropic
from tests.scoring.sessions.helpers import example_sessions
from tests.scoring.test_generic_examples import MAX_FIXED_AFTER_ITEM

CONFIG = REPO / "config"
ORIGINAL = (CONFIG / "prompts" / "alert_session_judge.md").read_text()
CACHED = (CONFIG / "prompts" / "alert_session_cached_judge.md").read_text()
# The fixed parts of the EP's prompt that alert_session sends after the session, outside the cache.
FIXED_AFTER_THE_SESSION_IN_THE_EP = (
    "**BEFORE YOU SCORE, ASK YOURSELF:**",
    "**SCORING CALIBRATION REMINDER:**",
    "**SCORING PHILOSOPHY:**",
    "**CRITICAL REMINDERS:**",
    "**Your evaluation must:**",
    "**MISSING TOOLS REMINDER:**",
    "**ALTERNATIVE APPROACHES REMINDER:**",
    "## OUTPUT FORMAT",
)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_the_suite_loads_with_alert_sessions_verdict_component_and_settings():
    assert "alert_session_cached" in list_suite_names(CONFIG)
    original = load_suite(CONFIG, "alert_session", env={})
    cached = load_suite(CONFIG, "alert_session_cached", env={})
    assert cached.criteria.kind == "alert_session"
    assert cached.criteria.components == original.criteria.components
    assert cached.criteria.threshold == original.criteria.threshold
    assert cached.criteria.judge.verdict_schema == original.criteria.judge.verdict_schema == JudgeOutputSchema.model_json_schema()
    assert (cached.criteria.judge.model, cached.criteria.judge.max_tokens) == (original.criteria.judge.model, original.criteria.judge.max_tokens)
    assert cached.options.judge.timeout_seconds == original.options.judge.timeout_seconds
    # Opt-in: the nightly run would otherwise judge every never-scored session a second time.
    assert cached.options.rescore.nightly is False


def test_its_hash_differs_and_alert_sessions_stays_pinned():
    from tests.scoring.test_criteria_pins import PINNED

    original = load_suite(CONFIG, "alert_session", env={})
    cached = load_suite(CONFIG, "alert_session_cached", env={})
    assert original.criteria_hash == PINNED["alert_session"]
    assert cached.criteria_hash != original.criteria_hash
    assert cached.criteria.judge.prompt == CACHED and original.criteria.judge.prompt == ORIGINAL


def test_the_words_are_the_eps_only_reordered():
    # Every line of the EP's prompt is kept; only its "YOUR TASK NOW" heading becomes "YOUR TASK",
    # moved with its checklist before the session (its two closing sentences stay after it).
    original, cached = _lines(ORIGINAL), _lines(CACHED)
    assert sorted(set(original) - set(cached)) == ["## YOUR TASK NOW"]
    assert sorted(set(cached) - set(original)) == ["## YOUR TASK"]
    assert len(cached) == len(original)
    assert template_placeholders(CACHED) == ["OUTPUT_SCHEMA", "SESSION_CONVERSATION", "ALERT_DATA"]


def test_every_fixed_part_comes_before_the_session():
    first_item = next(m for m in PLACEHOLDER.finditer(CACHED) if m.group(1) != OUTPUT_SCHEMA)
    fixed = CACHED[: first_item.start()]
    for part in (*FIXED_AFTER_THE_SESSION_IN_THE_EP, "## SCORING FRAMEWORK", "{{OUTPUT_SCHEMA}}"):
        assert part in fixed, part
    after = fixed_text_after_first_placeholder(CACHED)
    assert len(after.strip()) <= MAX_FIXED_AFTER_ITEM, after
    assert "{{OUTPUT_SCHEMA}}" not in after
    # The original layout, for contrast: most of its fixed text follows the session.
    assert len(fixed_text_after_first_placeholder(ORIGINAL)) > 10 * MAX_FIXED_AFTER_ITEM


def test_the_rendered_prompt_caches_all_fixed_text_and_sends_only_the_session_uncached():
    suite = load_suite(CONFIG, "alert_session_cached", env={})
    catalog = load_model_catalog(CONFIG)
    kind = get_kind("alert_session")
    completed = [s for s in example_sessions() if s["status"] == "completed"][:2]
    items = [kind.item_model.model_validate(raw) for raw in completed]
    prompts = [render_judge_prompt(suite.criteria, "judge", kind, item, catalog)[0] for item in items]
    schema = output_schema_text(JudgeOutputSchema)

    assert {p.system for p in prompts} == {prompts[0].system}  # one cached prefix for every session
    system = prompts[0].system
    assert system.startswith("You are a computer security expert")
    assert schema in system and "**SCORING CALIBRATION REMINDER:**" in system
    assert system.rstrip().endswith("The conversation includes all MCP tool interactions and their results.")
    assert prompts[0].system_blocks()[0]["cache_control"] == {"type": "ephemeral"}
    for prompt, item in zip(prompts, items):
        assert prompt.user.startswith(render_conversation(item))
        assert render_alert(item) in prompt.user
        assert schema not in prompt.user and "{{" not in prompt.user
        assert prompt.user.rstrip().endswith("following the methodology-focused framework given at the start.")
    assert prompts[0].user != prompts[1].user
    min_tokens = catalog.models[suite.criteria.judge.model].min_cacheable_tokens
    assert len(system) // 4 >= min_tokens


def test_bench_cost_reads_more_from_the_cache_and_costs_less_than_alert_session():
    catalog = load_model_catalog(CONFIG)
    kind = get_kind("alert_session")
    items = [kind.item_model.model_validate(raw) for raw in cost.session_items(6)]
    lanes = {}
    with FakeAnthropic(batch_processing_seconds=0.1) as fake:
        for name in ("alert_session", "alert_session_cached"):
            fake.reset()
            realtime = asyncio.run(cost.realtime_lane(cost.bench_suite(name), items, catalog, fake.base_url))
            fake.reset()
            batch = cost.batch_lane(cost.bench_suite(name), items, catalog, fake.base_url)
            assert realtime.judgments == realtime.verdicts == batch.verdicts == 6
            lanes[name] = (realtime, batch)
    before, after = lanes["alert_session"][0], lanes["alert_session_cached"][0]
    assert cache_read_ratio(after.usage) > cache_read_ratio(before.usage) + 0.2
    assert after.cost < before.cost
    # Same sessions, same words: the tokens sent are the same, only where the cache ends moves.
    sent = lambda lane: sum(lane.usage[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    assert abs(sent(after) - sent(before)) <= 6 * 8
    lines = cost.beside_uncached(lanes)
    assert [line.split(":")[0] for line in lines] == [
        "alert_session_cached vs alert_session, realtime", "alert_session_cached vs alert_session, batch"
    ]
    assert cost.beside_uncached({"alert_session_cached": lanes["alert_session_cached"]}) == []
