"""Suite loading and the criteria hash: what changes it, and what must not."""

import shutil
from pathlib import Path

import pytest

from assay.scoring.errors import CriteriaError, NotFound
from assay.scoring.metrics.registry import registered_metrics
from assay.scoring.suites import canonical_json, list_suite_names, load_suite, parse_suite

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config"

SCHEMA_MATCH_VERSION = registered_metrics()["kql.schema_match"].version

BASE = """
name: t
kind: kql
enabled: ${T_ENABLED:-true}
threshold: 0.9
components:
  schema_match: {weight: 0.5, metric: kql.schema_match, version: SCHEMA_MATCH_VERSION}
  llm_grading: {weight: 0.5, judge: true}
judge:
  model: ${T_MODEL:-claude-haiku-5-5}
  max_tokens: 512
  verdict: kql_grade
  prompt: "Grade {{GENERATED_KQL}} against {{EXPECTED_KQL}} for {{PROMPT}}."
  timeout_seconds: 30
""".replace("SCHEMA_MATCH_VERSION", str(SCHEMA_MATCH_VERSION))


def parse(text: str, env: dict | None = None):
    return parse_suite(text, config_dir=REPO_CONFIG, env=env or {})


def test_hash_is_sha256_of_canonical_json():
    import hashlib

    suite = parse(BASE)
    expected = hashlib.sha256(canonical_json(suite.criteria.model_dump(mode="json")).encode()).hexdigest()
    assert suite.criteria_hash == expected
    assert len(suite.criteria_hash) == 64


def test_reformatting_and_reordering_keys_keep_the_hash():
    reordered = """
threshold: 0.90
kind: kql
name: t
judge:
  timeout_seconds: 30
  prompt: "Grade {{GENERATED_KQL}} against {{EXPECTED_KQL}} for {{PROMPT}}."
  verdict: kql_grade
  max_tokens: 512
  model: claude-haiku-5-5
components:
  llm_grading:
    judge: true
    weight: 0.5
  schema_match:
    version: SCHEMA_MATCH_VERSION
    metric: kql.schema_match
    weight: 0.50
""".replace("SCHEMA_MATCH_VERSION", str(SCHEMA_MATCH_VERSION))
    assert parse(reordered).criteria_hash == parse(BASE).criteria_hash


@pytest.mark.parametrize(
    "operational_change",
    [
        ("timeout_seconds: 30", "timeout_seconds: 300"),
        ("enabled: ${T_ENABLED:-true}", "enabled: false"),
    ],
)
def test_operational_settings_do_not_change_the_hash(operational_change):
    old, new = operational_change
    assert parse(BASE.replace(old, new)).criteria_hash == parse(BASE).criteria_hash


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Grade {{GENERATED_KQL}}", "Strictly grade {{GENERATED_KQL}}"),  # the prompt
        ("weight: 0.5, metric", "weight: 0.4, metric"),  # a weight (the judge's is moved to keep the sum 1)
        ("${T_MODEL:-claude-haiku-5-5}", "claude-sonnet-5-5"),  # the model
        ("max_tokens: 512", "max_tokens: 1024"),
        ("threshold: 0.9", "threshold: 0.8"),
    ],
)
def test_criteria_edits_change_the_hash(old, new):
    changed = BASE.replace(old, new)
    if "weight: 0.4" in new:
        changed = changed.replace("weight: 0.5, judge", "weight: 0.6, judge")
    assert changed != BASE
    assert parse(changed).criteria_hash != parse(BASE).criteria_hash


def test_model_from_environment_changes_the_hash():
    assert parse(BASE, {"T_MODEL": "claude-opus-5-5"}).criteria_hash != parse(BASE).criteria_hash


def test_empty_model_resolves_to_provider_default_before_hashing():
    empty = parse(BASE.replace("${T_MODEL:-claude-haiku-5-5}", "${T_MODEL:-}"))
    explicit = parse(BASE.replace("${T_MODEL:-claude-haiku-5-5}", "claude-sonnet-5-5"))
    assert empty.criteria.judge.model == "claude-sonnet-5-5"
    assert empty.criteria_hash == explicit.criteria_hash


def test_deprecated_model_is_refused():
    with pytest.raises(CriteriaError, match="deprecated"):
        parse(BASE, {"T_MODEL": "claude-sonnet-4-5"})


def test_unknown_model_is_refused():
    with pytest.raises(CriteriaError, match="no price"):
        parse(BASE, {"T_MODEL": "gpt-4o-mini"})


def test_unset_bare_variable_names_it():
    with pytest.raises(CriteriaError, match="T_REQUIRED"):
        parse(BASE.replace("${T_MODEL:-claude-haiku-5-5}", "${T_REQUIRED}"))


def test_weights_must_add_up_to_one():
    with pytest.raises(CriteriaError, match="add up to 1"):
        parse(BASE.replace("weight: 0.5, judge", "weight: 0.3, judge"))


def test_unknown_metric_and_wrong_version_are_refused():
    with pytest.raises(CriteriaError, match="unknown metric"):
        parse(BASE.replace("kql.schema_match", "kql.nope"))
    with pytest.raises(CriteriaError, match="version"):
        parse(BASE.replace(f"version: {SCHEMA_MATCH_VERSION}", "version: 99"))


def test_unknown_kind_and_bad_yaml_are_clear_errors():
    with pytest.raises(CriteriaError, match="unknown suite kind"):
        parse(BASE.replace("kind: kql", "kind: sql"))
    with pytest.raises(CriteriaError, match="not valid YAML"):
        parse("name: [unclosed")


def test_prompt_file_edit_changes_the_hash(tmp_path):
    config = tmp_path / "config"
    shutil.copytree(REPO_CONFIG, config)
    before = load_suite(config, "kql", env={})
    prompt = config / "prompts" / "kql_grading.md"
    prompt.write_text(prompt.read_text() + "\nBe strict about time windows.\n")
    after = load_suite(config, "kql", env={})
    assert after.criteria_hash != before.criteria_hash
    assert "Be strict about time windows." in after.criteria.judge.prompt


def test_prompt_file_outside_config_dir_is_refused(tmp_path):
    with pytest.raises(CriteriaError, match="inside"):
        parse(BASE.replace('prompt: "Grade {{GENERATED_KQL}} against {{EXPECTED_KQL}} for {{PROMPT}}."', "prompt_file: ../../etc/passwd"))


def test_shipped_suites_load_and_unknown_suite_is_not_found():
    names = list_suite_names(REPO_CONFIG)
    assert "kql" in names
    for name in names:
        assert len(load_suite(REPO_CONFIG, name, env={}).criteria_hash) == 64
    with pytest.raises(NotFound, match="kql"):
        load_suite(REPO_CONFIG, "nope", env={})


@pytest.mark.parametrize("key", ["temperature: 0", "top_p: 0.9"])
def test_sampling_parameters_are_refused_with_the_reason(key):
    with pytest.raises(CriteriaError, match="no sampling parameters"):
        parse(BASE.replace("  max_tokens: 512", f"  max_tokens: 512\n  {key}"))
