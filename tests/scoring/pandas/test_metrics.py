"""The six metrics on single items: the pandas code-generation design's details fields, honest inputs."""

from __future__ import annotations

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds.pandas_codegen import (
    PandasItem,
    code_quality,
    correctness,
    error_recovery,
    performance,
    prompt_understanding,
    requirement_coverage,
)
from assay.scoring.pandas.execution import classify_error
from assay.scoring.pandas.performance import performance_score
from tests.scoring.pandas.scoring import CTX
from tests.scoring.pandas.validity_cases import SINGLE

QUESTION = "What is the average salary per department for employees older than 30?"
REFERENCE = "result = df[df.age > 30].groupby('department')['salary'].mean()"


def item(**fields):
    base = {"question": QUESTION, "frames": SINGLE, "generated_code": REFERENCE, "reference_code": REFERENCE}
    return PandasItem.model_validate({**base, **fields})


def test_prompt_understanding_has_the_design_fields():
    result = prompt_understanding()(item(), CTX)
    assert result.status == "ok" and result.score == pytest.approx(1.0)
    d = result.details
    assert d["column_extraction_score"] == pytest.approx(0.4)
    assert d["nl_parsing_score"] == pytest.approx(0.3)
    assert d["statistical_understanding_score"] == pytest.approx(0.3)
    assert set(d["extracted_columns"]) >= {"salary", "department", "age"}
    # With reference code, the columns required are those its operations are on (issue 19.6).
    assert d["requirements_source"] == "reference_code" and set(d["mentioned_columns"]) == {"salary", "department", "age"}
    assert set(d["statistical_operations"]) >= {"mean", "groupby"}


def test_requirement_coverage_lists_what_is_missing():
    result = requirement_coverage()(item(generated_code="result = df.groupby('department')['salary'].mean()"), CTX)
    d = result.details
    assert result.score == pytest.approx(0.7)
    assert d["filter_conditions_coverage"] == 0.0 and d["groupby_columns_coverage"] == 1.0
    assert d["sorting_coverage"] == 1.0 and d["join_conditions_coverage"] == 1.0
    assert any("Filter condition" in m for m in d["missing_requirements"])
    no_group = requirement_coverage()(item(generated_code="result = df[df.age > 30]['salary'].mean()"), CTX)
    assert no_group.details["missing_requirements"] == ["Groupby column(s) missing: department"]


def test_scores_stay_in_range_whatever_the_code():
    for code in ("result = 0", "import os", "result = df[", "x = (", "result = df.merge(df).merge(df).query('age > 1 and age > 2 and age > 3 and age > 4')"):
        for factory in (prompt_understanding, requirement_coverage):
            result = factory()(item(generated_code=code), CTX)
            assert result.status == "ok" and 0.0 <= result.score <= 1.0


def test_error_recovery_reexecutes_and_classifies_by_type():
    broken = "result = df[df.agee > 30].groupby('department')['salary'].mean()"  # AttributeError
    keyed = "result = df[df['agee'] > 30].groupby('department')['salary'].mean()"  # KeyError
    fixed = REFERENCE.replace("df.age", "df['age']")
    wrong = "result = df.groupby('department')['salary'].mean()"  # runs, wrong answer
    result = error_recovery()(item(generated_code=broken, recovery_attempts=[
        {"code": keyed, "error": "the model says: ValueError"},  # the item's own text is display only
        {"code": fixed, "error": None},
    ]), CTX)
    d = result.details
    assert result.status == "ok"
    assert d["has_error"] is True and d["error_type"] == "attribute_error" and d["error_message"].startswith("AttributeError:")
    assert d["recovery_attempts_count"] == 2 and d["recovery_success"] is True
    assert d["recovery_success_rate"] == pytest.approx(0.5)
    rows = d["recovery_details"]
    assert rows[0]["error_type"] == "column_error" and rows[0]["fix_quality"] == 0.5 and rows[0]["reported_error"].startswith("the model")
    assert rows[1]["success"] is True and rows[1]["fix_quality"] == 1.0
    assert d["error_fix_quality"] == pytest.approx(0.75)
    assert result.score == pytest.approx(0.5 * 0.5 + 0.3 * 0.75 + 0.2 * (2 / 3))
    # A recovery that runs but returns the wrong answer is not a success.
    not_fixed = error_recovery()(item(generated_code=broken, recovery_attempts=[{"code": wrong}]), CTX)
    assert not_fixed.details["recovery_success"] is False and not_fixed.details["recovery_details"][0]["error_type"] == "wrong_result"
    same = error_recovery()(item(generated_code=keyed, recovery_attempts=[{"code": keyed}]), CTX)
    assert same.details["recovery_details"][0]["fix_quality"] == 0.1
    # Only max_attempts attempts count.
    many = error_recovery(max_attempts=1)(item(generated_code=broken, recovery_attempts=[{"code": keyed}, {"code": fixed}]), CTX)
    assert many.details["recovery_attempts_count"] == 1 and many.details["attempts_ignored"] == 1


def test_an_item_without_error_has_no_recovery_to_score():
    result = error_recovery()(item(), CTX)
    assert result.status == "skipped" and result.score is None
    assert result.details["has_error"] is False and "no error" in result.reason
    no_attempts = error_recovery()(item(generated_code="result = df['nope'].sum()"), CTX)
    assert no_attempts.status == "ok" and no_attempts.score == 0.0 and no_attempts.details["recovery_attempts_count"] == 0


def test_error_classes_follow_exception_types():
    assert classify_error({"type": "KeyError", "mro": ["KeyError", "LookupError", "Exception"]}) == "column_error"
    assert classify_error({"type": "IndentationError", "mro": ["IndentationError", "SyntaxError", "Exception"]}) == "syntax_error"
    assert classify_error({"type": "UndefinedVariableError", "mro": ["KeyError", "NameError", "Exception"]}) == "column_error"
    assert classify_error({"type": "UnicodeDecodeError", "mro": ["UnicodeDecodeError", "UnicodeError", "ValueError"]}) == "value_error"
    assert classify_error({"type": "ZeroDivisionError", "mro": ["ZeroDivisionError", "ArithmeticError"]}) == "other_error"
    assert classify_error({"category": "timeout", "type": "Timeout", "mro": []}) == "other_error"
    # The message never decides: a ValueError whose text says KeyError is a value_error.
    assert classify_error({"type": "ValueError", "mro": ["ValueError"], "message": "KeyError: 'age'"}) == "value_error"


def test_correctness_from_reference_or_expected_result():
    assert correctness()(item(generated_code="result = df.query('age > 30').groupby('department').salary.mean()"), CTX).score == 1.0
    expected = [{"department": "Engineering", "salary": 91750.0}, {"department": "HR", "salary": 63500.0},
                {"department": "Marketing", "salary": 70500.0}, {"department": "Sales", "salary": 96000.0}]
    by_expected = correctness()(item(reference_code=None, expected_result=expected), CTX)
    assert by_expected.score == 1.0 and by_expected.details["truth_source"] == "expected_result"
    both = correctness()(item(expected_result=expected), CTX)
    assert both.details["reference_agrees_with_expected_result"] is True
    assert correctness()(item(reference_code=None), CTX).status == "skipped"
    bad_reference = correctness()(item(reference_code="result = df['missing'].sum()"), CTX)
    assert bad_reference.status == "failed" and "reference code did not execute" in bad_reference.reason


def test_an_escape_attempt_is_the_items_error():
    for code in ("import socket\nsocket.create_connection(('127.0.0.1', 9))", "import os\nos.fork()", "open('/etc/passwd').read()"):
        result = correctness()(item(generated_code=code), CTX)
        assert result.status == "ok" and result.score == 0.0
        assert result.details["executed"] is False and result.details["error"].startswith("PermissionError")
    slow = performance()(item(generated_code="import time\ntime.sleep(30)"), CTX)
    assert slow.score == 0.0 and "Timeout" in slow.details["error"]


def test_code_quality_lists_findings():
    clean = code_quality()(item(), CTX)
    assert clean.score == 1.0 and clean.details["lint_findings"] == [] and clean.details["smells"] == []
    messy = code_quality()(item(generated_code=(
        "import os\nout = []\nfor i, row in df.iterrows():\n    out.append(row['salary'])\n"
        "df[df.age > 30]['salary'] = 0\ndf.dropna(inplace=True)\nresult = sum(out) / len(out)"
    )), CTX)
    codes = {f["code"] for f in messy.details["lint_findings"]} | {s["code"] for s in messy.details["smells"]}
    assert {"F401", "row_loop", "chained_assignment", "PD002"} <= codes, codes
    assert messy.score < 0.6
    broken = code_quality()(item(generated_code="result = df["), CTX)
    assert broken.score == 0.0
    # The final expression is the answer by convention: not a "useless expression".
    assert code_quality()(item(generated_code="df['salary'].mean()"), CTX).score == 1.0


def test_performance_bands_relative_to_the_reference():
    quick = {"wall_ms": 5.0, "peak_memory_kb": 1000}
    assert performance_score(quick, quick)[0] == 1.0
    score, details = performance_score({"wall_ms": 400.0, "peak_memory_kb": 1000}, quick)
    assert details["time_ratio"] == pytest.approx(8.0) and details["time_band"] == 0.5 and score == pytest.approx(0.65)
    # Noise below the floors does not move the score.
    assert performance_score({"wall_ms": 45.0, "peak_memory_kb": 30_000}, {"wall_ms": 1.0, "peak_memory_kb": 100})[0] == 1.0
    absolute = performance_score({"wall_ms": 700.0, "peak_memory_kb": 300_000}, None)
    assert absolute[1]["basis"].startswith("absolute") and absolute[0] == pytest.approx(0.7 * 0.5 + 0.3 * 0.5)
    real = performance()(item(), CTX)
    assert real.status == "ok" and real.details["generated_wall_ms_runs"] and len(real.details["generated_wall_ms_runs"]) == 3


def test_metric_arguments_are_checked():
    with pytest.raises(CriteriaError):
        prompt_understanding(column_extraction=0.5, nl_parsing=0.3, statistical=0.3)
    with pytest.raises(CriteriaError):
        error_recovery(max_attempts=0)
    with pytest.raises(CriteriaError):
        performance(time_weight=2)


@pytest.mark.parametrize(
    "answer",
    [
        "result = df[df['department'] == 'Sales']['city'].unique()",  # ArrowStringArray under pandas 3
        "result = set(df.loc[df.department == 'Sales', 'city'])",
        "result = df[df.department == 'Sales'].city.unique().tolist()",
        "result = tuple(df[df.department == 'Sales'].city.drop_duplicates())",
        "result = df[df.department == 'Sales'].groupby('city').size().index",
    ],
)
def test_array_like_answers_are_correct(answer):
    question = "In which cities does the Sales department have employees?"
    reference = "result = df[df['department'] == 'Sales']['city'].drop_duplicates()"
    result = correctness()(item(question=question, reference_code=reference, generated_code=answer), CTX)
    assert result.status == "ok" and result.score == 1.0, result.details
