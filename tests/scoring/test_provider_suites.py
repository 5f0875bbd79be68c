"""Suites judging with any provider: provider and request parameters are criteria, checked against
config/models.yaml when the suite is validated; existing Anthropic suites hash as they always did."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.suites.loader import load_model_catalog, parse_suite

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config"
REPO_ROOT = REPO_CONFIG.parent

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


def test_max_completion_tokens_is_criteria_for_reasoning_models_only():
    plain = parse("provider: openai\n      model: gpt-5-mini\n      max_tokens: 800")
    roomy = parse("provider: openai\n      model: gpt-5-mini\n      max_tokens: 800\n      max_completion_tokens: 8000")
    assert suite_judge(roomy).parameters == {"max_completion_tokens": 8000}
    assert roomy.criteria_hash != plain.criteria_hash
    assert '"max_completion_tokens":8000' in roomy.criteria.canonical_json()
    assert "max_completion_tokens" not in plain.criteria.canonical_json()
    catalog = load_model_catalog(REPO_ROOT / "config")
    assert {name for name, m in catalog.models.items() if m.reasoning} == {"gpt-5", "gpt-5-mini", "gpt-5-nano", "o4-mini"}


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        (
            "provider: openai\n      model: gpt-4.1-mini\n      max_completion_tokens: 4000",
            (
                "max_completion_tokens: model 'gpt-4.1-mini' of provider 'openai' does not take this parameter (it "
                "takes: temperature, seed); reasoning_effort and max_completion_tokens are for reasoning models; remove the key"
            ),
        ),
        ("model: claude-haiku-5-5\n      max_completion_tokens: 4000", "takes no sampling parameters"),
        (
            "provider: openai\n      model: gpt-5-mini\n      max_tokens: 2000\n      max_completion_tokens: 1000",
            (
                "max_completion_tokens (1000) is the room for the reasoning and the answer together: it cannot be below "
                "max_tokens (2000)"
            ),
        ),
    ],
)
def test_max_completion_tokens_where_it_does_not_belong_is_refused_in_plain_words(judge, message):
    with pytest.raises(CriteriaError) as refused:
        parse(judge)
    assert message in refused.value.message


def test_a_catalog_giving_reasoning_parameters_to_a_model_that_does_not_reason_is_refused(tmp_path: Path):
    config = tmp_path / "config"
    shutil.copytree(REPO_CONFIG, config)
    text = (config / "models.yaml").read_text()
    start = text.index("  gpt-4.1:\n")
    end = text.index("    parameters: [temperature, seed]", start)
    (config / "models.yaml").write_text(text[:end] + "    parameters: [max_completion_tokens]" + text[end + 35 :])
    with pytest.raises(CriteriaError, match=r"are for reasoning models only: set reasoning: true"):
        load_model_catalog(config)


def test_the_batch_lane_takes_both_shipped_providers():
    assert parse("provider: openai\n      model: gpt-4.1-mini", extra="rescore: {lane: batch}\n").options.rescore.lane == "batch"
    assert parse("model: claude-haiku-5-5", extra="rescore: {lane: batch}\n").options.rescore.lane == "batch"


def test_a_local_server_takes_any_model_priced_zero(local_config):
    suite = parse("provider: local\n      model: my-finetune\n      temperature: 0.2", config_dir=local_config)
    catalog = load_model_catalog(local_config)
    price = catalog.price("local", "my-finetune")

    assert suite_judge(suite).model == "my-finetune" and suite_judge(suite).parameters == {"temperature": 0.2}
    assert (price.input_per_mtok, price.output_per_mtok, price.cache_read_per_mtok) == (0, 0, 0)
    assert catalog.providers["local"].max_in_flight == 16 and not catalog.providers["local"].has_batch_api
    refused = "rescore.lane: batch, but judge provider 'local' (component 'quality') has no batch API"
    with pytest.raises(CriteriaError, match=refused.replace("(", r"\(").replace(")", r"\)")):
        parse("provider: local\n      model: my-finetune", config_dir=local_config, extra="rescore: {lane: batch}\n")


def test_the_anthropic_sdks_deprecated_list_is_read_whole_without_importing_the_sdk():
    """Resolving models (every API start, every embedded run) reads the installed SDK's list from its
    source; it must be exactly the list the SDK holds, and the SDK must stay unimported."""
    probe = (
        "import sys, json; from assay.scoring.suites.catalog import anthropic_deprecated_models as m; "
        "print(json.dumps([m(), 'anthropic' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    read, imported = json.loads(done.stdout)
    from anthropic.resources.messages.messages import DEPRECATED_MODELS

    assert read == DEPRECATED_MODELS and len(read) >= 10
    assert not imported
