"""Validity: for every case with known truth, each correct answer scores above every wrong answer
for the same question (keyword-stuffed ``result = 0`` and dead code included), and correct answers
written in other styles (``.col``, ``query()``, ``agg``, ``pivot_table``, ``value_counts``, ``map``)
get full correctness and pass."""

from __future__ import annotations

import pytest

from tests.scoring.pandas.scoring import load_pandas_suite, score_item
from tests.scoring.pandas.validity_cases import CASES


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def suite():
    return load_pandas_suite()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_correct_answers_outscore_every_wrong_answer(case, suite):
    def total(code: str):
        raw = {"question": case.question, "frames": case.frames, "generated_code": code, "reference_code": case.reference}
        return score_item(raw, suite)

    reference = total(case.reference)
    correct = {code: total(code) for code in [case.reference, *case.correct]}
    wrong = {code: total(code) for code in case.wrong_answers()}
    for code, scored in correct.items():
        assert scored.total is not None, (code, scored.components)
        assert scored.score("correctness") == 1.0, (code, scored.components["correctness"].details)
        assert scored.total >= suite.criteria.threshold, (code, {n: c.score for n, c in scored.components.items()})
        # Another style is not penalised on the structural components either.
        assert scored.score("requirement_coverage") >= reference.score("requirement_coverage") - 0.05, (code, scored.components["requirement_coverage"].details)
    for code, scored in wrong.items():
        assert scored.total is not None, (code, scored.components)
        assert scored.score("correctness") < 1.0, code
        assert scored.total < suite.criteria.threshold, (code, {n: c.score for n, c in scored.components.items()})
    worst_correct = min(s.total for s in correct.values())
    best_wrong = max(s.total for s in wrong.values())
    assert worst_correct > best_wrong, (
        {c: round(s.total, 3) for c, s in correct.items()},
        {c: round(s.total, 3) for c, s in wrong.items()},
    )


def test_keyword_stuffing_earns_nothing_structural(suite):
    case = CASES[2]
    stuffed = score_item({"question": case.question, "frames": case.frames, "generated_code": case.wrong_answers()[-2], "reference_code": case.reference}, suite)
    assert stuffed.score("prompt_understanding") == 0.0
    assert stuffed.score("requirement_coverage") == 0.0
    assert stuffed.score("correctness") == 0.0
    dead = score_item({"question": case.question, "frames": case.frames, "generated_code": case.dead, "reference_code": case.reference}, suite)
    assert dead.score("prompt_understanding") == 0.0 and dead.score("requirement_coverage") == 0.0
    assert dead.components["prompt_understanding"].details["dead_code_lines"] == [1]
