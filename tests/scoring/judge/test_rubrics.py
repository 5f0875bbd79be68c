"""Rubric judges: verdict specs and their messages, the verdict models built from them (valid answers,
out-of-range answers refused, never clamped), their scores, the strict schema the judge is sent, and
the cache-first template."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from anthropic.types import Message, TextBlock, Usage
from pydantic import BaseModel, ValidationError

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.prompt import render_prompt
from assay.scoring.judge.rubrics import (
    DEFAULT_ITEM_TEMPLATE,
    VerdictSpec,
    compose_template,
    fixed_text_after_first_placeholder,
    rubric_verdict,
)
from assay.scoring.judge.providers.anthropic_messages import answer_of, output_config_for
from assay.scoring.judge.service import read_answer

SCALE = {"type": "scale", "min": 1, "max": 5}
LABELS = {"type": "labels", "labels": {"good": 1, "partial": 0.5, "bad": 0}}
CRITERIA = {
    "type": "criteria",
    "criteria": [
        {"name": "grounded", "weight": 0.7, "steps": ["List each claim", "Check each against the context"]},
        {"name": "complete", "weight": 0.3, "description": "Covers every part of the question."},
    ],
}
SPECS = {"score": {"type": "score"}, "scale": SCALE, "pass_fail": {"type": "pass_fail"}, "labels": LABELS, "criteria": CRITERIA}


def spec(raw: dict[str, Any]) -> VerdictSpec:
    return VerdictSpec.model_validate(raw)


def judge_answer(raw_spec: dict[str, Any], answer: Any) -> tuple[BaseModel | None, str | None]:
    """The answer read the way the judge service reads one (strict JSON against the verdict model)."""
    message = Message(
        id="msg_1", type="message", role="assistant", model="m", stop_reason="end_turn",
        content=[TextBlock(type="text", text=json.dumps(answer))], usage=Usage(input_tokens=1, output_tokens=1),
    )
    _, verdict, problem = read_answer(answer_of(message), rubric_verdict(spec(raw_spec)).model, 1024)
    return verdict, problem


def scored(raw_spec: dict[str, Any], answer: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    verdict, problem = judge_answer(raw_spec, answer)
    assert problem is None, problem
    return rubric_verdict(spec(raw_spec)).score(verdict)


# --- scores of valid answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw_spec", "answer", "expected_score", "expected_details"),
    [
        ({"type": "score"}, {"reasoning": "r", "score": 0.35}, 0.35, {"reasoning": "r", "score": 0.35}),
        ({"type": "score"}, {"reasoning": "r", "score": 1}, 1.0, {"reasoning": "r", "score": 1}),
        (SCALE, {"reasoning": "r", "score": 4}, 0.75, {"reasoning": "r", "scale": 4, "min": 1, "max": 5}),
        (SCALE, {"reasoning": "r", "score": 1}, 0.0, {"reasoning": "r", "scale": 1, "min": 1, "max": 5}),
        (SCALE, {"reasoning": "r", "score": 5}, 1.0, {"reasoning": "r", "scale": 5, "min": 1, "max": 5}),
        ({"type": "scale", "min": 0, "max": 10}, {"reasoning": "r", "score": 7}, 0.7, {"reasoning": "r", "scale": 7, "min": 0, "max": 10}),
        ({"type": "pass_fail"}, {"reasoning": "r", "passed": True}, 1.0, {"reasoning": "r", "passed": True}),
        ({"type": "pass_fail"}, {"reasoning": "r", "passed": False}, 0.0, {"reasoning": "r", "passed": False}),
        (LABELS, {"reasoning": "r", "label": "partial"}, 0.5, {"reasoning": "r", "label": "partial"}),
        (LABELS, {"reasoning": "r", "label": "bad"}, 0.0, {"reasoning": "r", "label": "bad"}),
    ],
)
def test_a_valid_answer_scores_with_its_raw_values_and_reasoning_in_details(raw_spec, answer, expected_score, expected_details):
    score, details = scored(raw_spec, answer)
    assert score == pytest.approx(expected_score)
    assert details == expected_details


def test_criteria_are_normalised_on_their_scale_and_combined_by_weight():
    answer = {
        "criteria": {"grounded": {"reasoning": "two claims unsupported", "score": 4}, "complete": {"reasoning": "all", "score": 5}},
        "reasoning": "mostly grounded",
    }
    score, details = scored(CRITERIA, answer)
    assert score == pytest.approx(0.7 * 0.75 + 0.3 * 1.0)
    assert details == {
        "reasoning": "mostly grounded",
        "min": 1,
        "max": 5,
        "criteria": {
            "grounded": {"score": 4, "normalised": 0.75, "weight": 0.7, "reasoning": "two claims unsupported"},
            "complete": {"score": 5, "normalised": 1.0, "weight": 0.3, "reasoning": "all"},
        },
    }


def test_criteria_on_their_own_scale_and_a_perfect_answer_is_exactly_one():
    names = [f"c{i}" for i in range(10)]
    raw = {"type": "criteria", "criteria": [{"name": n, "weight": 0.1} for n in names], "scale": {"min": 0, "max": 10}}
    perfect = {"criteria": {n: {"reasoning": "", "score": 10} for n in names}, "reasoning": ""}
    assert scored(raw, perfect)[0] == 1.0  # 0.1 added ten times is not 1.0 in floating point
    half = {"criteria": {n: {"reasoning": "", "score": 10 if i % 2 else 0} for i, n in enumerate(names)}, "reasoning": ""}
    assert scored(raw, half)[0] == pytest.approx(0.5)


def test_a_criterion_may_be_named_like_a_pydantic_attribute():
    raw = {"type": "criteria", "criteria": [{"name": "schema", "weight": 0.5}, {"name": "model_config", "weight": 0.5}]}
    answer = {"criteria": {"schema": {"reasoning": "a", "score": 2}, "model_config": {"reasoning": "b", "score": 3}}, "reasoning": "c"}
    score, details = scored(raw, answer)
    assert score == pytest.approx(0.5 * 0.25 + 0.5 * 0.5)
    assert list(details["criteria"]) == ["schema", "model_config"]


# --- answers the verdict model refuses (the service then asks once for a repair) -----------------------


@pytest.mark.parametrize(
    ("raw_spec", "answer", "where"),
    [
        ({"type": "score"}, {"reasoning": "r", "score": 1.5}, "score"),
        ({"type": "score"}, {"reasoning": "r", "score": -0.1}, "score"),
        ({"type": "score"}, {"reasoning": "r", "score": "0.5"}, "score"),
        ({"type": "score"}, {"score": 0.5}, "reasoning"),
        ({"type": "score"}, {"reasoning": "r", "score": 0.5, "confidence": 1}, "confidence"),
        (SCALE, {"reasoning": "r", "score": 0}, "score"),
        (SCALE, {"reasoning": "r", "score": 6}, "score"),
        (SCALE, {"reasoning": "r", "score": 4.5}, "score"),
        ({"type": "pass_fail"}, {"reasoning": "r", "passed": "yes"}, "passed"),
        ({"type": "pass_fail"}, {"reasoning": "r", "passed": 1}, "passed"),
        (LABELS, {"reasoning": "r", "label": "excellent"}, "label"),
        (LABELS, {"reasoning": "r", "label": "Good"}, "label"),
        (CRITERIA, {"criteria": {"grounded": {"reasoning": "r", "score": 6}, "complete": {"reasoning": "r", "score": 5}}, "reasoning": "r"}, "criteria.grounded.score"),
        (CRITERIA, {"criteria": {"grounded": {"reasoning": "r", "score": 4}}, "reasoning": "r"}, "criteria.complete"),
        (CRITERIA, {"criteria": {"grounded": {"reasoning": "r", "score": 4}, "complete": {"reasoning": "r", "score": 5}, "style": {"reasoning": "r", "score": 5}}, "reasoning": "r"}, "criteria.style"),
        (CRITERIA, {"criteria": {"grounded": {"score": 4}, "complete": {"reasoning": "r", "score": 5}}, "reasoning": "r"}, "criteria.grounded.reasoning"),
        (CRITERIA, {"criteria": {"grounded": {"reasoning": "r", "score": 4}, "complete": {"reasoning": "r", "score": 5}}}, "reasoning"),
    ],
)
def test_an_answer_out_of_range_or_off_schema_is_refused_not_clamped(raw_spec, answer, where):
    verdict, problem = judge_answer(raw_spec, answer)
    assert verdict is None
    assert problem is not None and problem.startswith("the answer does not match the verdict schema")
    assert f"{where}:" in problem


# --- the schema the judge is sent ----------------------------------------------------------------------


def _objects(schema: dict[str, Any]) -> list[dict[str, Any]]:
    found = [schema] if schema.get("type") == "object" else []
    for value in schema.values():
        if isinstance(value, dict):
            found += _objects(value)
    return found


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_verdict_type_survives_the_sdks_strict_schema_transform(name):
    model = rubric_verdict(spec(SPECS[name])).model
    strict = anthropic.transform_schema(model)
    assert output_config_for(model) == {"format": {"type": "json_schema", "schema": strict}}
    for obj in _objects(strict):
        assert obj["additionalProperties"] is False and set(obj["required"]) == set(obj["properties"])
    assert "reasoning" in strict["properties"]
    answer_fields = {"score": ["reasoning", "score"], "scale": ["reasoning", "score"], "pass_fail": ["reasoning", "passed"],
                     "labels": ["reasoning", "label"], "criteria": ["criteria", "reasoning"]}[name]
    assert list(strict["properties"]) == answer_fields  # reasoning is written before the verdict it explains


def test_the_schema_tells_the_judge_each_range():
    scale = anthropic.transform_schema(rubric_verdict(spec({"type": "scale", "min": 1, "max": 10})).model)
    assert scale["properties"]["score"]["type"] == "integer"
    assert "from 1 (worst) to 10 (best)" in scale["properties"]["score"]["description"]
    labels = anthropic.transform_schema(rubric_verdict(spec(LABELS)).model)
    assert labels["properties"]["label"]["enum"] == ["good", "partial", "bad"]
    criteria = anthropic.transform_schema(rubric_verdict(spec(CRITERIA)).model)
    scores = criteria["$defs"]["CriteriaScores"]
    assert list(scores["properties"]) == ["grounded", "complete"]
    assert "from 1 (worst) to 5 (best)" in criteria["$defs"]["CriterionScore"]["properties"]["score"]["description"]
    score = anthropic.transform_schema(rubric_verdict(spec({"type": "score"})).model)
    assert "from 0 (not at all) to 1 (fully)" in score["properties"]["score"]["description"]


def test_one_verdict_type_per_distinct_spec():
    assert rubric_verdict(spec(SCALE)) is rubric_verdict(spec(dict(SCALE)))
    assert rubric_verdict(spec(SCALE)) is not rubric_verdict(spec({**SCALE, "max": 10}))
    # The label order is the order the judge reads them in, so it is a different spec.
    reordered = {"type": "labels", "labels": {"bad": 0, "partial": 0.5, "good": 1}}
    model = rubric_verdict(spec(reordered)).model
    assert model is not rubric_verdict(spec(LABELS)).model
    assert model.model_json_schema()["properties"]["label"]["enum"] == ["bad", "partial", "good"]


# --- the spec: what it accepts, its messages, its dump --------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "loc", "message"),
    [
        ({"type": "scale", "min": 5, "max": 1}, "max", "must be greater than min (5)"),
        ({"type": "scale", "min": 3, "max": 3}, "max", "must be greater than min (3)"),
        ({"type": "scale", "min": 1, "max": 101}, "max", "must be between 0 and 100"),
        ({"type": "scale", "max": 5}, "min", "a scale verdict needs min"),
        ({"type": "score", "min": 1}, "min", "only a scale verdict has min, this one is score"),
        ({"type": "criteria", "criteria": [{"name": "a", "weight": 1}], "max": 5}, "max",
         "only a scale verdict has max, this one is criteria (a criteria verdict sets its range with scale: {min, max})"),
        ({"type": "scale", "min": 1, "max": 5, "scale": {"min": 1, "max": 5}}, "scale", "only a criteria verdict has scale, this one is scale"),
        ({"type": "pass_fail", "labels": {"a": 1, "b": 0}}, "labels", "only a labels verdict has labels, this one is pass_fail"),
        ({"type": "labels"}, "labels", "a labels verdict needs labels"),
        ({"type": "labels", "labels": {"good": 1}}, "labels", "give at least two labels, each with its score from 0 to 1"),
        ({"type": "labels", "labels": {"good": 1.5, "bad": 0}}, "labels", "label 'good' scores 1.5, a label's score is from 0 to 1"),
        ({"type": "labels", "labels": {"good": 1, "so so": 0.5}}, "labels",
         "label 'so so' must be a letter, then up to 63 letters, digits, '_' or '-'"),
        ({"type": "criteria"}, "criteria", "a criteria verdict needs criteria"),
        ({"type": "criteria", "criteria": []}, "criteria", "give at least one criterion"),
        ({"type": "criteria", "criteria": [{"name": "a", "weight": 0.7}, {"name": "b", "weight": 0.4}]}, "criteria",
         "criteria weights must add up to 1, they add up to 1.1"),
        ({"type": "criteria", "criteria": [{"name": "a", "weight": 0.5}, {"name": "a", "weight": 0.5}]}, "criteria",
         "criterion names must be unique; repeated: a"),
        ({"type": "criteria", "criteria": [{"name": "1st", "weight": 1}]}, "criteria.0.name",
         "criterion name '1st' must be a letter, then up to 63 letters, digits, '_' or '-'"),
        ({"type": "criteria", "criteria": [{"name": "a", "weight": 1, "steps": ["ok", " "]}]}, "criteria.0.steps", "step 2 is empty"),
        ({"type": "criteria", "criteria": [{"name": "a", "weight": 1, "tips": []}]}, "criteria.0.tips", "Extra inputs are not permitted"),
        ({"type": "criteria", "criteria": [{"name": "a", "weight": 1}], "scale": {"min": 5, "max": 1}}, "scale.max", "must be greater than min (5)"),
        ({"type": "score", "rubric": "x"}, "rubric", "Extra inputs are not permitted"),
    ],
)
def test_a_bad_spec_names_the_field_and_what_is_wrong(raw, loc, message):
    with pytest.raises(ValidationError) as caught:
        spec(raw)
    errors = {".".join(str(p) for p in err["loc"]): err["msg"] for err in caught.value.errors()}
    assert errors.get(loc) == message, errors


def test_the_dump_leaves_unset_fields_out_even_inside_another_model():
    class Holder(BaseModel):
        verdict: VerdictSpec

    assert spec({"type": "score"}).model_dump() == {"type": "score"}
    assert Holder(verdict=spec(SCALE)).model_dump(mode="json") == {"verdict": {"type": "scale", "min": 1, "max": 5}}
    assert spec(LABELS).model_dump(mode="json") == {"type": "labels", "labels": {"good": 1.0, "partial": 0.5, "bad": 0.0}}
    # A criteria verdict without a scale is on 1..5, and says so in its dump (so in the hash).
    dumped = spec(CRITERIA).model_dump(mode="json")
    assert dumped["scale"] == {"min": 1, "max": 5}
    assert spec(dumped) == spec(CRITERIA)


# --- the template ----------------------------------------------------------------------------------------

RUBRIC = "You grade a support answer against the reference answer.\nA correct answer states the same facts."
ITEM = {"input": "How do I reset my password?", "output": "Click 'Forgot password'. [1]", "expected": "Use the reset link."}


def render(template: str, raw_spec: dict[str, Any], inputs: dict[str, str] = ITEM):
    return render_prompt(template, inputs, rubric_verdict(spec(raw_spec)).model, model="m", min_cacheable_tokens=0)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_fixed_part_comes_before_the_item(name):
    template = compose_template(RUBRIC, None, spec(SPECS[name]))
    prompt = render(template, SPECS[name])
    schema = json.dumps(rubric_verdict(spec(SPECS[name])).model.model_json_schema(), indent=2, sort_keys=True)

    assert prompt.system.startswith(RUBRIC + "\n\n")
    assert schema in prompt.system and "## How to answer" in prompt.system
    assert prompt.user.startswith(ITEM["input"])
    assert ITEM["output"] in prompt.user and schema not in prompt.user
    assert prompt.system_blocks()[0]["cache_control"] == {"type": "ephemeral"}
    assert fixed_text_after_first_placeholder(template) == "\n\n### Output\n\n"
    if name == "criteria":
        for text in ("### grounded", "1. List each claim", "2. Check each against the context", "### complete",
                     "Covers every part of the question.", "as an integer from 1 (worst) to 5 (best)"):
            assert text in prompt.system
    if name == "labels":
        assert "exactly one of: good, partial, bad" in prompt.system


def test_the_default_item_template_shows_input_and_output_only():
    template = compose_template(RUBRIC, None, spec({"type": "pass_fail"}))
    assert template.endswith("## The item to grade\n" + DEFAULT_ITEM_TEMPLATE)
    # An item without expected or context still renders: the default names neither.
    prompt = render(template, {"type": "pass_fail"}, {"input": "q", "output": "a"})
    assert prompt.user == "q\n\n### Output\na\n"


def test_a_custom_prompt_follows_the_fixed_parts_and_its_placeholders_are_per_item():
    prompt_text = "### Question\n{{input}}\n\n### Reference answer\n{{expected}}\n\n### Answer to grade\n{{output}}\n"
    template = compose_template(RUBRIC, prompt_text, spec(SCALE))
    prompt = render(template, SCALE)
    assert prompt.system.endswith("## The item to grade\n### Question\n")
    assert prompt.user == f"{ITEM['input']}\n\n### Reference answer\n{ITEM['expected']}\n\n### Answer to grade\n{ITEM['output']}\n"
    assert len(fixed_text_after_first_placeholder(template)) <= 200
    # The item must provide what the prompt names; render_prompt fails the component with the reason.
    with pytest.raises(CriteriaError, match=r"\{\{expected\}\}"):
        render(template, SCALE, {"input": "q", "output": "a"})


def test_a_metadata_value_is_a_per_item_placeholder_and_not_allowed_in_fixed_text():
    template = compose_template(RUBRIC, "Answer in {{metadata.lang}}:\n{{output}}", spec({"type": "pass_fail"}))
    prompt = render(template, {"type": "pass_fail"}, {"input": "q", "output": "bonjour", "metadata.lang": "French"})
    assert prompt.system.endswith("## The item to grade\nAnswer in ")
    assert prompt.user == "French:\nbonjour\n"
    with pytest.raises(CriteriaError, match=r"rubric: is fixed text and may not contain \{\{metadata\.lang\}\}"):
        compose_template("Answers must be in {{metadata.lang}}.", None, spec({"type": "pass_fail"}))


def test_item_text_is_never_expanded_as_a_placeholder():
    template = compose_template(RUBRIC, "Q: {{input}}\nA: {{output}}\nRef: {{expected}}", spec({"type": "score"}))
    inputs = {"input": "say {{expected}}", "output": "{{OUTPUT_SCHEMA}} and {{input}}", "expected": "the reference"}
    prompt = render(template, {"type": "score"}, inputs)
    assert prompt.user == "say {{expected}}\nA: {{OUTPUT_SCHEMA}} and {{input}}\nRef: the reference\n"


@pytest.mark.parametrize(
    ("rubric", "prompt", "raw_spec", "message"),
    [
        ("  \n", None, {"type": "score"}, "rubric: must not be empty"),
        ("Compare {{output}} with the reference.", None, {"type": "score"}, "rubric: is fixed text and may not contain {{output}}"),
        ("Grade.\n{{OUTPUT_SCHEMA}}", None, {"type": "score"}, "rubric: is fixed text and may not contain {{OUTPUT_SCHEMA}}"),
        ("Grade.", None, {**CRITERIA, "criteria": [{"name": "a", "weight": 1, "steps": ["Read {{context}}"]}]},
         "verdict.criteria.0.steps.0: is fixed text and may not contain {{context}}"),
        ("Grade.", None, {**CRITERIA, "criteria": [{"name": "a", "weight": 1, "description": "vs {{expected}}"}]},
         "verdict.criteria.0.description: is fixed text and may not contain {{expected}}"),
        ("Grade.", "Grade the answer.", {"type": "score"}, "prompt: has no per-item placeholder"),
        ("Grade.", "{{output}}\n{{OUTPUT_SCHEMA}}", {"type": "score"}, "prompt: may not contain {{OUTPUT_SCHEMA}}"),
    ],
)
def test_a_template_that_cannot_be_cache_first_is_refused(rubric, prompt, raw_spec, message):
    with pytest.raises(CriteriaError) as caught:
        compose_template(rubric, prompt, spec(raw_spec))
    assert caught.value.message.startswith(message)


def test_fixed_text_after_the_first_placeholder():
    assert fixed_text_after_first_placeholder("Rubric {{OUTPUT_SCHEMA}}\nQ: {{input}}\nA: {{output}}\n") == "\nA: \n"
    # The schema after the item is fixed text outside the cache: it shows.
    assert fixed_text_after_first_placeholder("{{input}} then {{OUTPUT_SCHEMA}}") == " then {{OUTPUT_SCHEMA}}"
    with pytest.raises(ValueError, match="no per-item placeholder"):
        fixed_text_after_first_placeholder("only {{OUTPUT_SCHEMA}}")

