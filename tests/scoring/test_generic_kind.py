"""The generic kind: its item model, the ``fields`` mapping, what the judge sees, the too-long rule and
its live lines."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from pydantic import BaseModel, ValidationError

from assay.scoring.errors import CriteriaError, InvalidInput
from assay.scoring.judge.governor import estimate_tokens
from assay.scoring.judge.prompt import render_prompt
from assay.scoring.kinds import generic
from assay.scoring.kinds import get_kind, known_kinds
from assay.scoring.kinds.generic import (
    GenericItem,
    ItemTooLong,
    check_fields,
    judge_inputs,
    live_lines,
    prepare_judge,
    prepare_payload,
    render_context,
)


def _criteria(fields: dict[str, str] | None) -> SimpleNamespace:
    return SimpleNamespace(fields=fields)


# --- the item ----------------------------------------------------------------------------------------


def test_the_kind_is_registered() -> None:
    assert "generic" in known_kinds()
    kind = get_kind("generic")
    assert kind.item_model is GenericItem
    assert kind.prepare_payload is prepare_payload


def test_a_full_item_validates() -> None:
    item = GenericItem.model_validate(
        {
            "id": "q1",
            "input": "What is 2+2?",
            "output": {"answer": 4},
            "expected": "4",
            "context": ["Arithmetic.", "2+2=4"],
            "metadata": {"topic": "math"},
        }
    )
    assert item.output == {"answer": 4}
    assert item.context == ["Arithmetic.", "2+2=4"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"output": "x"}, "input"),
        ({"input": "x"}, "output"),
        ({"input": "x", "output": None}, "output"),
        ({"input": "x", "output": "y", "extra": 1}, "extra"),
        ({"input": 5, "output": "y"}, "input"),
        ({"input": "x", "output": "y", "expected": ["a"]}, "expected"),
        ({"input": "x", "output": "y", "context": [1, 2]}, "context"),
        ({"input": "x", "output": "y", "metadata": ["a"]}, "metadata"),
        ({"id": "", "input": "x", "output": "y"}, "id"),
        ({"id": "i" * 256, "input": "x", "output": "y"}, "id"),
        ({"input": "x" * 200_001, "output": "y"}, "input"),
    ],
)
def test_bad_items_are_refused_naming_the_field(payload: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        GenericItem.model_validate(payload)
    assert field in {str(err["loc"][0]) for err in info.value.errors()}


# --- the fields mapping ------------------------------------------------------------------------------

UPLOADED = {
    "qid": 17,
    "question": "Where is my parcel?",
    "response": {"choices": [{"text": "It ships tomorrow [1]."}]},
    "gold": {"text": "It ships tomorrow."},
    "retrieved": ["Parcels ship in a day.", "Returns take a week."],
    "level": "easy",
    "internal": "left out",
}
MAPPING = {
    "id": "qid",
    "input": "question",
    "output": "response.choices[0].text",
    "expected": "gold.text",
    "context": "retrieved",
    "metadata.level": "level",
}


def test_mapping_builds_the_canonical_item_and_leaves_the_rest_out() -> None:
    payload = prepare_payload(UPLOADED, _criteria(MAPPING))
    assert payload == {
        "id": "17",  # an integer id is taken as its text
        "input": "Where is my parcel?",
        "output": "It ships tomorrow [1].",
        "expected": "It ships tomorrow.",
        "context": ["Parcels ship in a day.", "Returns take a week."],
        "metadata": {"level": "easy"},
    }
    GenericItem.model_validate(payload)


def test_unmapped_canonical_keys_are_taken_as_they_are() -> None:
    payload = prepare_payload({"input": "q", "answer": "a", "id": "x", "other": 1}, _criteria({"output": "answer"}))
    assert payload == {"input": "q", "output": "a", "id": "x"}


def test_metadata_keys_make_the_whole_metadata() -> None:
    payload = prepare_payload(
        {"input": "q", "output": "a", "metadata": {"old": 1}, "lvl": 2}, _criteria({"metadata.level": "lvl"})
    )
    assert payload == {"input": "q", "output": "a", "metadata": {"level": 2}}


def test_mapping_swaps_fields_from_the_original_object() -> None:
    payload = prepare_payload({"input": "A", "output": "B"}, _criteria({"input": "output", "output": "input"}))
    assert payload == {"input": "B", "output": "A"}


def test_whole_metadata_object_and_json_output() -> None:
    payload = prepare_payload(
        {"q": "q", "out": {"tools": ["a", "b"]}, "meta": {"k": [1]}},
        _criteria({"input": "q", "output": "out", "metadata": "meta"}),
    )
    assert payload == {"input": "q", "output": {"tools": ["a", "b"]}, "metadata": {"k": [1]}}


def test_without_fields_the_object_is_the_payload() -> None:
    line = {"input": "q", "output": "a", "junk": 1}
    assert prepare_payload(line, _criteria(None)) is line
    with pytest.raises(ValidationError):  # the strict model then refuses the unknown key
        GenericItem.model_validate(prepare_payload(line, _criteria(None)))


def test_a_missing_required_path_names_the_path_and_the_keys_found() -> None:
    with pytest.raises(InvalidInput) as info:
        prepare_payload({"question": "q", "response": {"choices": []}}, _criteria(MAPPING))
    assert info.value.message == (
        "output (mapped from response.choices[0].text) is not in the item: $.response.choices has 0 elements, no index 0"
    )
    with pytest.raises(InvalidInput) as info:
        prepare_payload({"question": "q", "response": "x"}, _criteria(MAPPING))
    assert info.value.message == "output (mapped from response.choices[0].text) is not in the item: $.response is not an object"
    with pytest.raises(InvalidInput) as info:
        prepare_payload({"response": "x"}, _criteria(MAPPING))
    assert info.value.message == "input (mapped from question) is not in the item: $ has no key 'question'"


def test_a_null_required_value_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^output \(mapped from a\) is null$"):
        prepare_payload({"q": "x", "a": None}, _criteria({"input": "q", "output": "a"}))


def test_a_missing_optional_path_leaves_the_field_unset() -> None:
    payload = prepare_payload({"q": "x", "a": "y", "gold": None}, _criteria({"input": "q", "output": "a", "expected": "gold.text"}))
    assert payload == {"input": "x", "output": "y"}


def test_a_mapped_value_of_the_wrong_type_is_refused_by_the_model() -> None:
    payload = prepare_payload({"q": {"text": "x"}, "a": "y"}, _criteria({"input": "q", "output": "a"}))
    with pytest.raises(ValidationError, match="input"):
        GenericItem.model_validate(payload)


def test_a_non_object_line_is_refused() -> None:
    with pytest.raises(InvalidInput, match="an item is a JSON object, got an array"):
        prepare_payload([1, 2], _criteria(MAPPING))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"outptu": "answer"}, "fields.outptu: not a field of a generic item"),
        ({"metadata.": "x"}, "fields.metadata.: not a field"),
        ({"output": "a..b"}, "fields.output: 'a..b' is not a path like a.b[0].c"),
        ({"output": "a[x]"}, "fields.output: 'a[x]' is not a path like a.b[0].c"),
        ({"metadata": "m", "metadata.k": "k"}, "map either metadata as a whole or metadata.KEY"),
    ],
)
def test_bad_mappings_are_criteria_errors(fields: dict[str, str], message: str) -> None:
    with pytest.raises(CriteriaError, match=re.escape(message)):
        check_fields(fields)
    with pytest.raises(CriteriaError):
        prepare_payload({"input": "q", "output": "a"}, _criteria(fields))


# --- what the judge sees -------------------------------------------------------------------------------


def test_judge_inputs_render_every_field_the_item_has() -> None:
    item = GenericItem(
        input="Q",
        output={"b": 1},
        expected="E",
        context=["one", "two"],
        metadata={"lang": "fr", "limits": {"words": 50}},
    )
    assert judge_inputs(item) == {
        "input": "Q",
        "output": json.dumps({"b": 1}, indent=2),
        "expected": "E",
        "context": "[1] one\n\n[2] two",
        "metadata.lang": "fr",
        "metadata.limits": json.dumps({"words": 50}, indent=2),
    }


def test_absent_fields_provide_no_placeholder_so_a_template_using_one_fails() -> None:
    item = GenericItem(input="Q", output="A")
    inputs = judge_inputs(item)
    assert set(inputs) == {"input", "output"}
    with pytest.raises(CriteriaError, match=r"\{\{expected\}\}"):
        render_prompt("Grade.\n{{input}}\n{{output}}\n{{expected}}", inputs, _Verdict, model="m", min_cacheable_tokens=0)


def test_a_single_text_context_is_shown_as_is() -> None:
    assert judge_inputs(GenericItem(input="q", output="a", context="one text"))["context"] == "one text"


def test_item_text_holding_a_placeholder_is_never_expanded() -> None:
    item = GenericItem(input="say {{output}}", output="{{expected}}", expected="SECRET")
    prompt = render_prompt(
        "Grade.\n{{input}}\n{{output}}\n{{expected}}", judge_inputs(item), _Verdict, model="m", min_cacheable_tokens=0
    )
    assert prompt.user == "say {{output}}\n{{expected}}\nSECRET"


def test_render_context_names_what_was_left_out() -> None:
    assert render_context(["a", "b", "c"], keep=1) == "[1] a\n\n[passages 2-3 of 3 left out to fit the judge's context window]"


# --- too long for the judge --------------------------------------------------------------------------------


class _Verdict(BaseModel):
    score: float


TEMPLATE = "Grade the answer.\n{{OUTPUT_SCHEMA}}\nQ: {{input}}\nA: {{output}}\nContext:\n{{context}}"


def _fit(item: GenericItem, context_window: int, template: str = TEMPLATE) -> tuple[dict[str, str], dict]:
    return prepare_judge(
        item, template=template, verdict_model=_Verdict, model="m", max_tokens=100, context_window=context_window
    )


def test_an_item_that_fits_is_untouched_and_the_measure_recorded() -> None:
    item = GenericItem(input="q", output="a", context=["p1", "p2"])
    inputs, details = _fit(item, 10_000)
    assert inputs == judge_inputs(item)
    assert details["judge_input"]["truncated"] is False
    assert details["judge_input"]["context_window"] == 10_000


def test_trailing_passages_are_dropped_last_first_with_a_note() -> None:
    passages = [f"passage {n} " + "x" * 2000 for n in range(1, 7)]  # ~500 tokens each
    item = GenericItem(input="q", output="a", context=passages)
    inputs, details = _fit(item, 2000)
    record = details["judge_input"]
    assert record["truncated"] is True
    assert record["rule"] == "trailing context passages first"
    assert record["passages_total"] == 6
    kept = record["passages_kept"]
    assert 1 <= kept < 6
    assert inputs["context"] == render_context(passages, keep=kept)
    assert f"[passages {kept + 1}-6 of 6 left out" in inputs["context"]
    assert record["estimated_tokens"] <= record["budget_tokens"] < record["estimated_tokens_before"]
    # The kept passages are the first ones, whole.
    assert inputs["context"].startswith("[1] " + passages[0])


def test_the_kept_passages_are_the_most_that_fit() -> None:
    passages = [("p" * (n * 37 % 500)) for n in range(300)]  # lengths vary, some passages are empty
    item = GenericItem(input="q", output="a", context=passages)
    inputs, details = _fit(item, 6000)
    record = details["judge_input"]
    kept = record["passages_kept"]
    assert 1 < kept < 300
    others = record["estimated_tokens_before"] - estimate_tokens(render_context(passages))
    assert record["estimated_tokens"] == others + estimate_tokens(inputs["context"]) <= record["budget_tokens"]
    assert others + estimate_tokens(render_context(passages, keep=kept + 1)) > record["budget_tokens"]


def test_fitting_a_long_list_of_passages_renders_it_twice_not_once_per_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    # The security review's item: 72,000 empty passages (288 KB of JSON). Cutting one passage at a time
    # and re-rendering the list each time was quadratic (20 s of a judge worker's event loop).
    passages = [""] * 72_000
    item = GenericItem(input="q", output="a", context=passages)
    renders: list[int | None] = []
    real_render = generic.render_context

    def counted(context: str | list[str], keep: int | None = None) -> str:
        renders.append(keep)
        return real_render(context, keep)

    monkeypatch.setattr(generic, "render_context", counted)
    inputs, details = _fit(item, 100_000)
    record = details["judge_input"]
    assert renders == [None, record["passages_kept"]]  # the whole list once (measured), the cut once
    assert 1 < record["passages_kept"] < 72_000
    assert inputs["context"] == real_render(passages, keep=record["passages_kept"])
    assert record["estimated_tokens"] <= record["budget_tokens"]


def test_an_item_still_too_long_fails_with_the_sizes() -> None:
    item = GenericItem(input="q", output="y" * 40_000, context=["a", "b"])
    with pytest.raises(ItemTooLong) as info:
        _fit(item, 2000)
    message = info.value.message
    assert "too long for judge model m" in message
    assert "{{output}} ~10001" in message
    assert "with every context passage but the first left out" in message
    assert info.value.details["judge_input"]["passages_kept"] == 1


def test_a_single_text_context_is_never_cut() -> None:
    item = GenericItem(input="q", output="a", context="z" * 40_000)
    with pytest.raises(ItemTooLong, match=r"\{\{context\}\} ~10001") as info:
        _fit(item, 2000)
    assert info.value.details["judge_input"]["truncated"] is False


def test_text_the_template_does_not_show_does_not_count() -> None:
    item = GenericItem(input="q", output="a", context="z" * 40_000)
    _, details = _fit(item, 2000, template="Grade.\n{{OUTPUT_SCHEMA}}\n{{input}}\n{{output}}")
    assert details["judge_input"]["truncated"] is False
    assert details["judge_input"]["estimated_tokens"] == 2


# --- live lines ----------------------------------------------------------------------------------------------


def _score(status: str, total: float | None, passed: bool | None, input_text: str = "What is 2+2?") -> SimpleNamespace:
    components = [
        SimpleNamespace(component="exact", score=1.0, status="ok"),
        SimpleNamespace(component="correctness", score=None, status="skipped"),
    ]
    return SimpleNamespace(
        status=status,
        total=total,
        passed=passed,
        partial=True,
        error_message=None,
        components=components,
        item=SimpleNamespace(payload={"input": input_text, "output": "4"}),
    )


def test_live_lines_show_the_input_the_score_and_each_component() -> None:
    lines = live_lines(_score("completed", 1.0, True), 0.7)
    assert lines == ["Input: What is 2+2?", "Score: 100.0% (PASS ≥70%) (partial) — exact: 100% | correctness: skipped"]


def test_live_lines_cut_a_long_input_on_one_line() -> None:
    lines = live_lines(_score("pending", None, None, input_text="word\n" * 100), 0.7)
    assert lines[0].startswith("Input: word word")
    assert lines[0].endswith(" …")
    assert len(lines[0]) <= len("Input: ") + 200
    assert lines[1].startswith("PENDING")


def test_a_metadata_placeholder_is_filled_per_item() -> None:
    item = GenericItem(input="Q", output="A", metadata={"audience": "children", "limits": [1, 2]})
    prompt = render_prompt(
        "Grade for the audience.\n{{metadata.audience}}\n{{output}}\n{{metadata.limits}}",
        judge_inputs(item),
        _Verdict,
        model="m",
        min_cacheable_tokens=0,
    )
    assert prompt.system == "Grade for the audience.\n"
    assert prompt.user == "children\nA\n" + json.dumps([1, 2], indent=2)
    with pytest.raises(CriteriaError, match=r"\{\{metadata\.tone\}\}"):
        render_prompt("Grade.\n{{metadata.tone}}", judge_inputs(item), _Verdict, model="m", min_cacheable_tokens=0)
