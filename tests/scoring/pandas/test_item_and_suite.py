"""Item validation (clear per-item errors), the suite file, the kind's judge hooks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from assay.scoring.judge.prompt import render_prompt
from assay.scoring.judge.verdicts import verdict_type
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.pandas_codegen import PandasCodeReview, PandasItem
from tests.scoring.pandas.scoring import REPO, load_pandas_suite

FRAMES = {"df": [{"a": 1, "b": "x"}]}


def error_of(**fields) -> str:
    base = {"question": "q", "frames": FRAMES, "generated_code": "result = df.a.sum()"}
    with pytest.raises(ValidationError) as info:
        PandasItem.model_validate({**base, **fields})
    return str(info.value)


def test_a_valid_item():
    item = PandasItem.model_validate({
        "id": "x-1", "question": "Sum of a?", "frames": {"t1": [{"a": 1}], "t2": []}, "generated_code": "result = t1.a.sum()",
        "reference_code": "result = t1['a'].sum()", "expected_result": 1,
        "recovery_attempts": [{"code": "result = 1", "error": "KeyError: 'a'"}], "order_matters": False,
    })
    assert item.expected_result_given and item.recovery_attempts[0].error == "KeyError: 'a'"
    assert PandasItem.model_validate({"question": "q", "dataset": "storm", "generated_code": "x"}).dataset == "storm"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"frames": None}, "exactly one of dataset"),
        ({"dataset": "d"}, "exactly one of dataset"),
        ({"frames": {}}, "at least one table"),
        ({"frames": {"1bad": []}}, "must be an identifier"),
        ({"frames": {"pd": []}}, "reserved"),
        ({"frames": {"t": [{"a": [1, 2]}]}}, "frames.t.0.a"),
        ({"generated_code": ""}, "generated_code"),
        ({"question": ""}, "question"),
        ({"reference_code": "result = ("}, "reference_code does not parse"),
        ({"expected_result": {"rows": []}}, "{\"columns\""),
        ({"expected_result": {"columns": ["a"], "data": [[1, 2]]}}, "each as long as columns"),
        ({"expected_result": [{"a": {"nested": 1}}]}, "only numbers, strings"),
        ({"recovery_attempts": [{"code": ""}]}, "recovery_attempts.0.code"),
        ({"recovery_attempts": [{"code": "x"}] * 11}, "recovery_attempts"),
        ({"unknown": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_items_get_clear_errors(fields, message):
    assert message in error_of(**fields)


def test_the_suite_has_the_design_weights_and_no_sampling_parameters():
    suite = load_pandas_suite()
    weights = {n: c.weight for n, c in suite.criteria.components.items()}
    assert weights == {
        "correctness": 0.25, "code_quality": 0.20, "performance": 0.15,
        "prompt_understanding": 0.15, "requirement_coverage": 0.15, "error_recovery": 0.10,
    }
    assert sum(weights.values()) == pytest.approx(1.0)
    assert suite.criteria.kind == "pandas_codegen" and suite.criteria.judge is None
    assert suite.criteria.components["prompt_understanding"].args == {"column_extraction": 0.4, "nl_parsing": 0.3, "statistical": 0.3}
    assert suite.criteria.components["requirement_coverage"].args == {"filters": 0.3, "groupby": 0.3, "sorting": 0.2, "joins": 0.2}
    assert len(suite.criteria_hash) == 64


def test_the_review_prompt_renders_with_the_kind_inputs():
    kind = get_kind("pandas_codegen")
    item = PandasItem.model_validate({"question": "Sum of a?", "frames": FRAMES, "generated_code": "result = df.a.sum()", "expected_result": 1})
    inputs = kind.judge_inputs(item)
    assert set(inputs) == {"QUESTION", "TABLES", "GENERATED_CODE", "REFERENCE_CODE", "EXPECTED_RESULT"}
    assert "columns a, b" in inputs["TABLES"] and inputs["REFERENCE_CODE"] == "(none given)"
    template = (REPO / "config" / "prompts" / "pandas_review.md").read_text()
    prompt = render_prompt(template, inputs, PandasCodeReview, model="claude-haiku-5-5", min_cacheable_tokens=0)
    assert "result = df.a.sum()" in prompt.user and "senior data engineer" in prompt.system
    score, details = verdict_type("pandas_review").score(PandasCodeReview(score=0.75, reasoning="fine", issues=["uses a loop"]))
    assert score == 0.75 and details == {"reasoning": "fine", "issues": ["uses a loop"]}
