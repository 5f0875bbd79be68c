"""Suites judging with any provider: provider and request parameters are criteria, checked against
config/models.yaml when the suite is validated; existing Anthropic suites hash as they always did."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.suites.loader import load_model_catalog, parse_suite

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config"

SUITE = """
name: providers
kind: generic
threshold: 0.5
components:
  quality:
    weight: 1.0
    judge:
      rubric: Is the answer correct and complete?
      verdict: {type: score}
      JUDGE
"""


def parse(judge: str, config_dir: Path = REPO_CONFIG, extra: str = ""):
    return parse_suite(SUITE.replace("JUDGE", judge) + extra, config_dir=config_dir, env={}, origin="api")


def judge_of(suite):
    return suite.criteria.components["quality"].judge


def test_an_openai_judge_with_its_parameters_is_criteria():
    plain = parse("provider: openai\n      model: gpt-4.1-mini")
    tuned = parse("provider: openai\n      model: gpt-4.1-mini\n      temperature: 0\n      seed: 7")

    assert judge_of(tuned).provider == "openai" and judge_of(tuned).parameters == {"temperature": 0.0, "seed": 7}
    assert tuned.criteria_hash != plain.criteria_hash
    assert '"seed":7' in tuned.criteria.canonical_json() and '"seed"' not in plain.criteria.canonical_json()
    assert suite_judge(tuned).parameters == {"temperature": 0.0, "seed": 7}


def suite_judge(suite):
    return suite.criteria.judge_for("quality")


def test_the_provider_is_criteria_and_an_anthropic_judge_dumps_no_parameters():
    anthropic = parse("model: claude-haiku-5-5")
    openai = parse("provider: openai\n      model: gpt-4.1-nano")
    assert anthropic.criteria_hash != openai.criteria_hash
    dumped = anthropic.criteria.canonical_json()
    assert '"provider":"anthropic"' in dumped
    assert not any(f'"{name}"' in dumped for name in ("temperature", "seed", "reasoning_effort"))


def test_the_providers_default_model_is_resolved():
    assert judge_of(parse("provider: openai")).model == "gpt-5-mini"


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        ("provider: openai\n      model: gpt-5-mini\n      temperature: 0", "model 'gpt-5-mini' of provider 'openai' does not take"),
        ("provider: openai\n      model: gpt-4.1-mini\n      reasoning_effort: low", "it takes: temperature, seed"),
        ("model: claude-haiku-5-5\n      seed: 1", "takes no sampling parameters"),
        ("provider: openai\n      model: o1-mini", "'o1-mini' is deprecated (end of life 2025-10-27)"),
        ("provider: openai\n      model: claude-haiku-5-5", "served by provider 'anthropic', not 'openai'"),
        ("provider: openai\n      model: gpt-unknown", "no price in config/models.yaml; known for openai"),
        ("provider: mistral", "unknown judge provider 'mistral'; known: anthropic, openai"),
        ("provider: openai\n      model: gpt-5-mini\n      reasoning_effort: enormous", "reasoning_effort"),
        ("provider: openai\n      model: gpt-4.1\n      temperature: 3", "temperature"),
    ],
)
def test_what_a_model_does_not_take_is_refused_with_the_reason(judge, message):
    with pytest.raises(CriteriaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(judge)


def test_reasoning_effort_is_taken_by_reasoning_models():
    suite = parse("provider: openai\n      model: gpt-5-mini\n      reasoning_effort: low")
    assert suite_judge(suite).parameters == {"reasoning_effort": "low"}


def test_the_batch_lane_is_refused_for_a_provider_without_a_batch_api():
    with pytest.raises(CriteriaError, match="judge provider 'openai' .* has no batch API"):
        parse("provider: openai\n      model: gpt-4.1-mini", extra="rescore: {lane: batch}\n")
    assert parse("model: claude-haiku-5-5", extra="rescore: {lane: batch}\n").options.rescore.lane == "batch"


def test_a_local_server_takes_any_model_priced_zero(local_config):
    suite = parse("provider: local\n      model: my-finetune\n      temperature: 0.2", config_dir=local_config)
    catalog = load_model_catalog(local_config)
    price = catalog.price("local", "my-finetune")

    assert suite_judge(suite).model == "my-finetune" and suite_judge(suite).parameters == {"temperature": 0.2}
    assert (price.input_per_mtok, price.output_per_mtok, price.cache_read_per_mtok) == (0, 0, 0)
    assert catalog.providers["local"].max_in_flight == 16 and not catalog.providers["local"].has_batch_api
    with pytest.raises(CriteriaError, match="has no batch API"):
        parse("provider: local\n      model: my-finetune", config_dir=local_config, extra="rescore: {lane: batch}\n")
