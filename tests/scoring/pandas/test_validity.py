"""Validity on the labelled set (issue 19): for every case with a truth, each correct candidate gets
full correctness and passes, no wrong candidate passes, and every correct total is above every wrong
total (keyword-stuffed ``result = 0`` and dead code included), whatever the class of cause: the
earlier baseline, requirements the question only seems to state, array-like answers, recovered
items. Without a truth nothing passes. ``python -m bench.validity_pandas`` prints the figures."""

from __future__ import annotations

import pytest

from tests.scoring.pandas.scoring import load_pandas_suite, score_item
from tests.scoring.pandas.validity_cases import CASES, CLASSES, LABELLED


def test_the_labelled_set_has_several_cases_of_each_class():
    assert len(CASES) >= 20
    assert len({(c.cls, c.name) for c in LABELLED}) == len(LABELLED)
    for cls in CLASSES:
        cases = [c for c in LABELLED if c.cls == cls]
        assert len(cases) >= 2, cls
        assert all(c.correct and c.wrong for c in cases), cls


@pytest.fixture(scope="module")
def suite():
    return load_pandas_suite()


@pytest.mark.parametrize("case", LABELLED, ids=[f"{c.cls}-{c.name}" for c in LABELLED])
def test_correct_candidates_pass_and_outscore_every_wrong_one(case, suite):
    correct = {i: score_item(case.item(c), suite) for i, c in enumerate(case.correct)}
    wrong = {i: score_item(case.item(c), suite) for i, c in enumerate(case.wrong)}
    if not case.passable:
        for scored in [*correct.values(), *wrong.values()]:
            assert scored.total is not None and not scored.passed
            assert scored.components["correctness"].status == "skipped" and scored.blockers
        return
    reference = score_item(case.item(case.reference), suite) if case.reference else None
    for i, scored in correct.items():
        summary = (case.correct[i], {n: c.score for n, c in scored.components.items()})
        assert scored.total is not None, summary
        assert scored.score("correctness") == 1.0, (summary, scored.components["correctness"].details)
        assert scored.passed, summary
        if reference is not None:  # another style is not penalised on the structural components either
            assert scored.score("requirement_coverage") >= reference.score("requirement_coverage") - 0.05, (
                summary, scored.components["requirement_coverage"].details)
    for i, scored in wrong.items():
        summary = (case.wrong[i], {n: c.score for n, c in scored.components.items()})
        assert scored.total is not None, summary
        assert scored.score("correctness") < 1.0 and not scored.passed, summary
    worst_correct = min(s.total for s in correct.values())
    best_wrong = max(s.total for s in wrong.values())
    assert worst_correct > best_wrong, (
        {i: round(s.total, 3) for i, s in correct.items()}, {i: round(s.total, 3) for i, s in wrong.items()})


def test_keyword_stuffing_earns_nothing_structural(suite):
    case = CASES[2]
    stuffed = score_item({"question": case.question, "frames": case.frames, "generated_code": case.wrong_answers()[-2], "reference_code": case.reference}, suite)
    assert stuffed.score("prompt_understanding") == 0.0
    assert stuffed.score("requirement_coverage") == 0.0
    assert stuffed.score("correctness") == 0.0
    dead = score_item({"question": case.question, "frames": case.frames, "generated_code": case.dead, "reference_code": case.reference}, suite)
    assert dead.score("prompt_understanding") == 0.0 and dead.score("requirement_coverage") == 0.0
    assert dead.components["prompt_understanding"].details["dead_code_lines"] == [1]
