"""Suite loading and the criteria hash: what changes it, and what must not."""

import json
import shutil
from pathlib import Path

import pytest

from assay.scoring.errors import CriteriaError, NotFound
from assay.scoring.judge.rubrics import DEFAULT_ITEM_TEMPLATE, rubric_verdict
from assay.scoring.metrics.catalog import registered_metrics
from assay.scoring.suites.loader import (
    Criteria,
    canonical_json,
    list_suite_names,
    load_suite,
    parse_suite,
)

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


# --- issue 20: rubric judges, several judges, min_score, fields, suite origins ---------------------
GENERIC = """
name: support
kind: generic
threshold: 0.7
fields: {input: question, output: answer, expected: gold.text}
components:
  exact:
    weight: 0.2
    metric: exact_match
    version: 1
    args: {case_sensitive: false}
    min_score: 1.0
  correctness:
    weight: 0.4
    judge:
      model: claude-haiku-5-5
      max_tokens: 512
      rubric: "You grade a support answer against the reference answer."
      prompt: "Question: {{input}}\\nReference: {{expected}}\\nAnswer: {{output}}\\n"
      verdict: {type: scale, min: 1, max: 5}
      timeout_seconds: 20
  faithfulness:
    weight: 0.4
    judge:
      rubric: "Judge whether the answer is grounded in the retrieved context."
      verdict:
        type: criteria
        criteria:
          - {name: grounded, weight: 0.7, steps: ["List each claim", "Check each against the context"]}
          - {name: complete, weight: 0.3}
"""


def parse_generic(text: str = GENERIC, **kwargs):
    return parse_suite(text, config_dir=REPO_CONFIG, env={}, **kwargs)


def test_rubric_judges_resolve_each_with_its_model_template_and_verdict():
    criteria = parse_generic().criteria
    assert criteria.judge_components == ["correctness", "faithfulness"]
    assert criteria.judge is None and criteria.judge_component is None  # no suite-level judge

    correctness = criteria.judge_for("correctness")
    assert (correctness.component, correctness.model, correctness.max_tokens) == ("correctness", "claude-haiku-5-5", 512)
    assert correctness.template.startswith("You grade a support answer")
    assert correctness.template.index("{{OUTPUT_SCHEMA}}") < correctness.template.index("{{input}}")  # cache-first
    verdict = correctness.verdict.model.model_validate({"reasoning": "close", "score": 4})
    assert correctness.verdict.score(verdict)[0] == 0.75

    faithfulness = criteria.judge_for("faithfulness")
    stored = criteria.components["faithfulness"].judge
    # Defaults: the provider's default model, 1024 tokens, the default per-item template.
    assert faithfulness.model == "claude-sonnet-5-5" and faithfulness.max_tokens == 1024
    assert stored.prompt == DEFAULT_ITEM_TEMPLATE and "1. List each claim" in faithfulness.template
    assert stored.verdict_schema == rubric_verdict(stored.verdict).model.model_json_schema()
    assert faithfulness.verdict is rubric_verdict(stored.verdict)


def test_judge_for_a_metric_component_or_an_unknown_one_is_a_criteria_error():
    criteria = parse_generic().criteria
    for name in ("exact", "nope"):
        with pytest.raises(CriteriaError, match=f"component '{name}' is not a judge component"):
            criteria.judge_for(name)


def test_the_legacy_judge_resolves_through_judge_for_with_its_registered_verdict():
    from assay.scoring.kinds.kql import KqlGrade

    criteria = parse(BASE).criteria
    judge = criteria.judge_for("llm_grading")
    assert criteria.judge_components == ["llm_grading"]
    assert judge.template == criteria.judge.prompt and judge.model == "claude-haiku-5-5"
    assert judge.verdict.model is KqlGrade
    assert judge.verdict.score(KqlGrade(score=0.5, reasoning="half"))[0] == 0.5


def test_a_rubric_judges_timeout_is_operational():
    suite = parse_generic()
    assert suite.options.judge.timeout_for("correctness") == 20
    assert suite.options.judge.timeout_for("faithfulness") == 60  # the suite-level default
    changed = parse_generic(GENERIC.replace("timeout_seconds: 20", "timeout_seconds: 90"))
    assert changed.criteria_hash == suite.criteria_hash
    assert changed.options.judge.timeout_for("correctness") == 90


def test_stored_criteria_rebuild_to_the_same_hash():
    """Workers rebuild criteria from the stored JSON: a rubric judge must come back as one, not as True."""
    criteria = parse_generic().criteria
    rebuilt = Criteria.model_validate(json.loads(criteria.canonical_json()))
    assert rebuilt.criteria_hash == criteria.criteria_hash
    assert rebuilt.judge_for("correctness") == criteria.judge_for("correctness")


def test_editing_one_rubric_changes_the_hash_and_only_that_components_fingerprint():
    before = parse_generic().criteria
    after = parse_generic(GENERIC.replace("grounded in the retrieved context", "grounded in the context")).criteria
    assert after.criteria_hash != before.criteria_hash
    changed = [n for n in before.components if before.component_fingerprint(n) != after.component_fingerprint(n)]
    assert changed == ["faithfulness"]


def test_fingerprints_leave_out_what_only_finalizing_reads():
    """Weights and min_score change the total and the pass, never a component's result."""
    base = parse_generic().criteria
    reweighted = parse_generic(
        GENERIC.replace("weight: 0.2", "weight: 0.3").replace("weight: 0.4\n    judge:\n      model", "weight: 0.3\n    judge:\n      model")
        .replace("min_score: 1.0", "min_score: 0.5")
    ).criteria
    assert reweighted.criteria_hash != base.criteria_hash
    assert reweighted.components["correctness"].weight == 0.3
    assert all(reweighted.component_fingerprint(n) == base.component_fingerprint(n) for n in base.components)


def test_fingerprints_see_the_suite_judge_the_kind_and_the_fields():
    before = parse(BASE).criteria
    after = parse(BASE.replace("Grade {{GENERATED_KQL}}", "Strictly grade {{GENERATED_KQL}}")).criteria
    assert after.component_fingerprint("llm_grading") != before.component_fingerprint("llm_grading")
    assert after.component_fingerprint("schema_match") == before.component_fingerprint("schema_match")
    remapped = parse_generic(GENERIC.replace("expected: gold.text", "expected: gold.answer")).criteria
    base = parse_generic().criteria
    assert all(remapped.component_fingerprint(n) != base.component_fingerprint(n) for n in base.components)


def test_min_score_is_hashed_only_when_set_and_bounded():
    with_floor = parse_generic()
    without = parse_generic(GENERIC.replace("    min_score: 1.0\n", ""))
    assert json.loads(with_floor.criteria.canonical_json())["components"]["exact"]["min_score"] == 1.0
    assert "min_score" not in json.loads(without.criteria.canonical_json())["components"]["exact"]
    assert with_floor.criteria_hash != without.criteria_hash
    with pytest.raises(CriteriaError, match=r"components\.exact\.min_score: Input should be less than or equal to 1"):
        parse_generic(GENERIC.replace("min_score: 1.0", "min_score: 1.5"))


def test_fields_are_hashed_only_when_set_and_checked_by_the_kind():
    dumped = json.loads(parse_generic().criteria.canonical_json())
    assert dumped["fields"] == {"input": "question", "output": "answer", "expected": "gold.text"}
    assert "fields" not in json.loads(parse_generic(GENERIC.replace("fields: {input: question, output: answer, expected: gold.text}\n", "")).criteria.canonical_json())
    with pytest.raises(CriteriaError, match=r"fields\.answer_text: not a field of a generic item"):
        parse_generic(GENERIC.replace("output: answer,", "answer_text: answer,"))
    with pytest.raises(CriteriaError, match="items of kind 'kql' take no field mapping"):
        parse(BASE.replace("threshold: 0.9", "threshold: 0.9\nfields: {prompt: question}"))


def test_plugin_is_absent_for_metrics_that_ship_with_assay():
    dumped = json.loads(parse_generic().criteria.canonical_json())
    assert "plugin" not in dumped["components"]["exact"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('rubric: "You grade', 'rubric_file: x.md\n      rubric: "You grade', "give exactly one of rubric or rubric_file"),
        ("{type: scale, min: 1, max: 5}", "{type: stars}", r"components\.correctness\.judge\.verdict\.type"),
        ("{type: scale, min: 1, max: 5}", "{type: scale, min: 5, max: 1}", r"verdict\.max: must be greater than min"),
        ("max_tokens: 512", "max_tokens: 512\n      temperature: 0", "no sampling parameters"),
        ("max_tokens: 512", "max_tokens: 512\n      nope: 1", r"components\.correctness\.judge\.nope: Extra inputs"),
        ("model: claude-haiku-5-5", "model: gpt-4o", r"components\.correctness\.judge: judge model 'gpt-4o' has no price"),
        ('prompt: "Question: {{input}}\\nReference: {{expected}}\\nAnswer: {{output}}\\n"', 'prompt: "Grade it."', "has no per-item placeholder"),
        ("args: {case_sensitive: false}", "args: {case_sensitive: false, nope: 1}", r"component 'exact'.*args\.nope"),
        ("args: {case_sensitive: false}", "args: {case_sensitive: false}\n    judge: true", "either a metric"),
    ],
)
def test_bad_components_are_refused_naming_the_field(old, new, message):
    assert old in GENERIC
    with pytest.raises(CriteriaError, match=message):
        parse_generic(GENERIC.replace(old, new, 1))


def test_at_most_one_component_uses_the_suite_level_judge():
    two = BASE.replace("  llm_grading: {weight: 0.5, judge: true}", "  a: {weight: 0.25, judge: true}\n  b: {weight: 0.25, judge: true}")
    with pytest.raises(CriteriaError, match="at most one component with judge: true"):
        parse(two)


def test_a_suite_mixes_the_suite_level_judge_with_rubric_judges():
    mixed = BASE.replace(
        "  llm_grading: {weight: 0.5, judge: true}",
        "  llm_grading: {weight: 0.25, judge: true}\n"
        "  style:\n    weight: 0.25\n    judge:\n      rubric: Judge the query's style.\n"
        "      prompt: '{{GENERATED_KQL}}'\n      verdict: {type: pass_fail}",
    )
    criteria = parse(mixed).criteria
    assert criteria.judge_components == ["llm_grading", "style"]
    assert criteria.judge_for("style").template.endswith("{{GENERATED_KQL}}\n")


# --- origins ---------------------------------------------------------------------------------------


def test_an_api_suite_without_server_inputs_resolves_as_a_file_suite_does():
    assert parse_generic(origin="api").criteria_hash == parse_generic().criteria_hash


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GENERIC.replace("model: claude-haiku-5-5", "model: ${MODEL:-claude-haiku-5-5}"), r"may not use \$\{VAR\} substitution"),
        (GENERIC.replace('rubric: "You grade a support answer against the reference answer."', "rubric_file: rubric.md"),
         r"components\.correctness\.judge\.rubric_file: a suite registered through the API may not use rubric_file"),
        # Anywhere in the text, even where no substitution would have been made.
        (GENERIC.replace("grounded in the retrieved context", "grounded in ${SECRET}"), r"may not use \$\{VAR\}"),
        (GENERIC.replace("args: {case_sensitive: false}", "args: {case_sensitive: false, python: 'import os'}"),
         r"components\.exact\.args\.python: a suite registered through the API may not carry code"),
    ],
)
def test_an_api_suite_may_not_bring_server_files_environment_or_code(text, message):
    with pytest.raises(CriteriaError, match=message):
        parse_generic(text, origin="api")


def test_an_api_suite_may_not_name_a_prompt_file():
    text = BASE.replace("enabled: ${T_ENABLED:-true}", "enabled: true").replace("${T_MODEL:-claude-haiku-5-5}", "claude-haiku-5-5")
    text = text.replace('prompt: "Grade {{GENERATED_KQL}} against {{EXPECTED_KQL}} for {{PROMPT}}."', "prompt_file: prompts/kql_grading.md")
    assert parse(text).criteria.judge.prompt == (REPO_CONFIG / "prompts" / "kql_grading.md").read_text()
    with pytest.raises(CriteriaError, match=r"judge\.prompt_file: a suite registered through the API may not use prompt_file"):
        parse_suite(text, config_dir=REPO_CONFIG, env={}, origin="api")


def test_a_path_suite_reads_its_files_beside_it_and_nowhere_else(tmp_path):
    (tmp_path / "rubrics").mkdir()
    (tmp_path / "rubrics" / "correctness.md").write_text("You grade answers from a file.")
    text = GENERIC.replace('rubric: "You grade a support answer against the reference answer."', "rubric_file: rubrics/correctness.md")
    suite_file = tmp_path / "support.yaml"
    suite = parse_generic(text, origin="path", source=str(suite_file))
    assert suite.criteria.judge_for("correctness").template.startswith("You grade answers from a file.")
    # The same text installed in config/ looks inside config/ and finds nothing there.
    with pytest.raises(CriteriaError, match="rubric_file 'rubrics/correctness.md' is not a file inside"):
        parse_generic(text, origin="file")
    with pytest.raises(CriteriaError, match=r"rubric_file '\.\./outside\.md' is not a file inside"):
        (tmp_path.parent / "outside.md").write_text("escape")
        parse_generic(text.replace("rubrics/correctness.md", "../outside.md"), origin="path", files_dir=tmp_path)


def test_an_api_suites_data_may_use_any_key_name():
    """Only settings are checked for code: a JSON Schema describing a ``code`` field is data."""
    schema_suite = GENERIC.replace(
        "args: {case_sensitive: false}\n    min_score: 1.0",
        "args: {case_sensitive: false}\n    min_score: 1.0\n  shape:\n    weight: 0.1\n    metric: json_schema\n"
        "    version: 1\n    args: {schema: {type: object, properties: {code: {type: string}}}}",
    ).replace("  exact:\n    weight: 0.2", "  exact:\n    weight: 0.1")
    assert "code" in json.dumps(json.loads(parse_generic(schema_suite, origin="api").criteria.canonical_json()))
