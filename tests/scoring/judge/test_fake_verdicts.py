"""The fake judge answers every rubric verdict type (design 20: score, scale, pass_fail, labels,
criteria; the models judge.rubrics builds) with JSON the verdict model accepts, and, when scripted
``out_of_range``, with JSON it refuses: an integer past the scale, an unknown label. Driven through
the real SDK and the judge's own strict ``output_config`` (the SDK's strict transform moves bounds
into descriptions)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from pydantic import BaseModel

from assay.scoring.judge.rubrics import VerdictSpec, rubric_verdict
from assay.scoring.judge.providers.anthropic_messages import output_config_for
from tests.fakes.anthropic_server import out_of_range_answer, schema_answer
from tests.scoring.judge.conftest import MODEL


def rubric_model(**spec: Any) -> type[BaseModel]:
    """The verdict model judge.rubrics builds for a suite's ``verdict:`` section."""
    return rubric_verdict(VerdictSpec(**spec)).model


ScoreVerdict = rubric_model(type="score")
ScaleVerdict = rubric_model(type="scale", min=1, max=10)
PassFailVerdict = rubric_model(type="pass_fail")
LabelVerdict = rubric_model(type="labels", labels={"good": 1.0, "partial": 0.5, "bad": 0.0})
# Named criteria, each scored on its scale with its reasoning (nested objects, keyed by criterion name).
CriteriaVerdict = rubric_model(
    type="criteria",
    criteria=[{"name": "grounded", "weight": 0.7, "steps": ["List each claim"]}, {"name": "complete", "weight": 0.3}],
)


VERDICTS = [ScoreVerdict, ScaleVerdict, PassFailVerdict, LabelVerdict, CriteriaVerdict]
NAMES = ["score", "scale", "pass_fail", "labels", "criteria"]
KEYS = [f"{n * 7919:016x}" + "0" * 48 for n in range(1, 201)]


def ask(client, text: str, verdict: type[BaseModel]):
    return client.messages.create(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": text}],
        output_config=output_config_for(verdict),
    )


@pytest.mark.parametrize("verdict", VERDICTS, ids=NAMES)
def test_every_verdict_type_gets_answers_its_model_accepts(client, fake, verdict):
    for n in range(5):
        text = ask(client, f"item {n}", verdict).content[0].text
        verdict.model_validate_json(text, strict=True)


@pytest.mark.parametrize("verdict", VERDICTS, ids=NAMES)
def test_scripted_out_of_range_answers_are_refused(client, fake, verdict):
    fake.script({"kind": "out_of_range"})
    text = ask(client, "item", verdict).content[0].text
    with pytest.raises(pydantic.ValidationError):
        verdict.model_validate_json(text, strict=True)


def test_answers_cover_the_whole_scale_and_every_label():
    scale = output_config_for(ScaleVerdict)["format"]["schema"]
    labels = output_config_for(LabelVerdict)["format"]["schema"]
    assert {schema_answer(scale, k)["score"] for k in KEYS} == set(range(1, 11))
    assert {schema_answer(labels, k)["label"] for k in KEYS} == {"good", "partial", "bad"}
    flags = {schema_answer(output_config_for(PassFailVerdict)["format"]["schema"], k)["passed"] for k in KEYS}
    assert flags == {True, False}


def test_out_of_range_breaks_the_scale_and_names_an_unknown_label():
    scale = output_config_for(ScaleVerdict)["format"]["schema"]
    assert out_of_range_answer(scale, KEYS[0], extra_field=False)["score"] == 11  # one past the maximum
    labels = output_config_for(LabelVerdict)["format"]["schema"]
    answer = out_of_range_answer(labels, KEYS[0], extra_field=False)
    assert answer["label"] not in ("good", "partial", "bad") and "note" not in answer
    nested = output_config_for(CriteriaVerdict)["format"]["schema"]
    broken = out_of_range_answer(nested, KEYS[0], extra_field=False)["criteria"]
    assert broken["grounded"]["score"] == 6 and broken["complete"]["score"] == 6


def test_an_unknown_label_never_collides_with_a_listed_one():
    schema = {"type": "object", "properties": {"label": {"type": "string", "enum": ["unlisted", "unlisted_label"]}}}
    assert out_of_range_answer(schema, KEYS[0], extra_field=False)["label"] == "unlisted_label_label"


def test_a_boolean_verdict_out_of_range_gets_a_field_the_schema_forbids():
    schema = output_config_for(PassFailVerdict)["format"]["schema"]
    assert out_of_range_answer(schema, KEYS[0], extra_field=False)["note"]
