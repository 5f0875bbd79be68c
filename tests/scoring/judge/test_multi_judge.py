"""A suite with several judge components: each is its own judge call (through run_judge, with its
breaker, governor, retries and repair) with its own template and verdict type, scored through
``scorer.compute`` against the loopback fake."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from assay.scoring.judge.breaker import InProcessBreaker
from assay.scoring.judge.governor import InProcessGovernor
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.providers.anthropic_messages import AnthropicProvider, make_client
from assay.scoring.judge.providers.registry import ProviderRegistry, build_registry, in_process_in_flight
from assay.scoring.kinds import get_kind
from assay.scoring.metrics.registry import MetricContext
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.scorer import JudgeRuntime, WorkUnit, compute, render_judge_prompt
from assay.scoring.suites.loader import load_model_catalog, parse_suite
from assay.settings import REPO_ROOT
from tests.scoring.judge.conftest import FAST_POLICY

CONFIG = REPO_ROOT / "config"

SUITE = """
name: two_judges
kind: generic
threshold: 0.5
components:
  length:
    weight: 0.2
    metric: length_words
    version: 1
    args: {min: 1}
  correctness:
    weight: 0.4
    judge:
      model: claude-haiku-5-5
      rubric: You grade a support answer against the reference answer.
      prompt: |
        Question: {{input}}
        Reference: {{expected}}
        Answer: {{output}}
        Product: {{metadata.product}}
      verdict: {type: scale, min: 1, max: 5}
  faithfulness:
    weight: 0.4
    judge:
      model: claude-haiku-5-5
      rubric: You judge whether an answer is grounded in the retrieved passages.
      prompt: |
        Passages:
        {{context}}
        Answer: {{output}}
      verdict:
        type: criteria
        criteria:
          - {name: grounded, weight: 0.7, steps: [List each claim, Check each against the passages]}
          - {name: complete, weight: 0.3}
"""

ITEM = {
    "input": "How do I reset my password?",
    "output": "Use the 'Forgot password' link [1].",
    "expected": "Click 'Forgot password' on the sign-in page.",
    "context": ["Passwords are reset from the sign-in page.", "Support never asks for passwords."],
    "metadata": {"product": "portal"},
}


@pytest.fixture
def criteria():
    return parse_suite(SUITE, config_dir=CONFIG, env={}, origin="api").criteria


@pytest.fixture
def runtime(fake):
    client = make_client("test-key", fake.base_url, timeout=5.0)
    yield JudgeRuntime(
        providers=ProviderRegistry({"anthropic": AnthropicProvider("anthropic", client)}),
        breaker=InProcessBreaker(),
        governor=InProcessGovernor({}),
        catalog=load_model_catalog(CONFIG),
        policy=FAST_POLICY,
    )
    judge_loop().run(client.close())


def work(criteria, component: str, item: dict | None = None) -> WorkUnit:
    kind = get_kind("generic")
    return WorkUnit(
        ref=ComponentRef(uuid.uuid4(), component, "judge"),
        criteria_hash=criteria.criteria_hash,
        criteria=criteria,
        kind=kind,
        item=kind.item_model.model_validate(item or ITEM),
        context=MetricContext(now=datetime.now(UTC)),
        judge_timeout=5.0,
    )


def test_each_judge_component_is_its_own_call_with_its_own_verdict(criteria, runtime, fake):
    results = {name: compute(work(criteria, name), runtime) for name in criteria.judge_components}
    assert compute(work(criteria, "length"), runtime).status == "ok"  # the metric beside them calls nothing
    calls = fake.calls()
    assert calls["total"] == 2 and not calls["repairs"]
    assert len(calls["counts"]) == 2  # two different prompts, one call each

    correctness, faithfulness = results["correctness"], results["faithfulness"]
    assert correctness.status == "ok" and faithfulness.status == "ok"
    # A scale verdict: the judge's 1..5 grade, normalised.
    assert 1 <= correctness.details["scale"] <= 5
    assert correctness.score == pytest.approx((correctness.details["scale"] - 1) / 4)
    # A criteria verdict: each criterion with its own reasoning, combined by weight.
    per = faithfulness.details["criteria"]
    assert set(per) == {"grounded", "complete"} and all(c["reasoning"] for c in per.values())
    assert faithfulness.score == pytest.approx(0.7 * per["grounded"]["normalised"] + 0.3 * per["complete"]["normalised"])
    for result in (correctness, faithfulness):
        assert result.details["reasoning"] and result.details["model"] == "claude-haiku-5-5"
        assert result.details["calls"] == 1 and result.details["repaired"] is False
        assert result.cost_usd > 0 and result.usage["output_tokens"] > 0


def test_a_repair_is_asked_and_recorded_for_that_component_only(criteria, runtime, fake):
    fake.script({"kind": "out_of_range"})
    repaired = compute(work(criteria, "correctness"), runtime)
    plain = compute(work(criteria, "faithfulness"), runtime)
    assert repaired.status == "ok" and repaired.details["repaired"] is True and repaired.details["calls"] == 2
    assert plain.status == "ok" and plain.details["repaired"] is False and plain.details["calls"] == 1
    assert fake.calls()["total"] == 3


def test_an_unusable_answer_after_the_repair_fails_the_component_with_the_raw_answer(criteria, runtime, fake):
    fake.script({"kind": "malformed", "times": 2})
    result = compute(work(criteria, "faithfulness"), runtime)
    assert result.status == "failed" and "unusable answer after one repair attempt" in result.reason
    assert result.raw_output and result.details["repaired"] is True


def test_a_missing_dotted_placeholder_fails_only_the_component_that_uses_it(criteria, runtime, fake):
    item = {**ITEM, "metadata": {}}
    failed = compute(work(criteria, "correctness", item), runtime)
    assert failed.status == "failed" and "{{metadata.product}}" in failed.reason
    assert fake.calls()["total"] == 0  # nothing was sent for it
    assert compute(work(criteria, "faithfulness", item), runtime).status == "ok"


def test_the_rubric_is_in_the_cached_system_prompt_and_the_item_in_the_user_message(criteria):
    kind = get_kind("generic")
    item = kind.item_model.model_validate({**ITEM, "output": "The {{expected}} is a secret"})
    prompt, _ = render_judge_prompt(criteria, "correctness", kind, item, load_model_catalog(CONFIG))
    # Fixed text first: the rubric, then the verdict's schema; the item only after them.
    assert prompt.system.startswith("You grade a support answer") and '"reasoning"' in prompt.system
    assert "How do I reset my password?" not in prompt.system
    assert prompt.system_blocks()[0]["cache_control"] == {"type": "ephemeral"}
    assert "Product: portal" in prompt.user
    # Single pass: item text that looks like a placeholder stays as it is.
    assert "Answer: The {{expected}} is a secret" in prompt.user


def test_without_a_key_every_judge_component_is_skipped(criteria):
    catalog = load_model_catalog(CONFIG)
    providers = build_registry(
        catalog, anthropic_key=None, anthropic_base_url=None, in_flight=in_process_in_flight(), env={}
    )
    runtime = JudgeRuntime(providers=providers, breaker=None, governor=None, catalog=catalog)
    for name in criteria.judge_components:
        result = compute(work(criteria, name), runtime)
        assert result.status == "skipped" and "no Anthropic API key" in result.reason
