"""The fake judge's ``repeat_spread``: the n-th answer for one item key moves every bounded number by
+spread (n even) or -spread (n odd) of its range, staying in range; a repair answers like the call it
repairs; enumerations and booleans do not move; 0 answers alike every time."""

from __future__ import annotations

import json

import pytest

from assay.scoring.judge.rubrics import VerdictSpec, rubric_verdict
from assay.scoring.judge.providers.anthropic_messages import output_config_for
from tests.fakes.anthropic_server import schema_answer
from tests.scoring.judge.conftest import MODEL

SCORE = output_config_for(rubric_verdict(VerdictSpec(type="score")).model)["format"]["schema"]
SCALE = output_config_for(rubric_verdict(VerdictSpec(type="scale", min=1, max=5)).model)["format"]["schema"]
PASS_FAIL = output_config_for(rubric_verdict(VerdictSpec(type="pass_fail")).model)["format"]["schema"]
KEYS = [f"{n * 7919:016x}" + "0" * 48 for n in range(1, 101)]


def test_a_0_to_1_score_alternates_by_the_spread_and_stays_in_range():
    for key in KEYS:
        answers = [schema_answer(SCORE, key, repeat=n, spread=0.1)["score"] for n in range(4)]
        base = schema_answer(SCORE, key)["score"]
        centre = min(0.9, max(0.1, base))  # pulled inside the range by the move
        assert answers == pytest.approx([centre + 0.1, centre - 0.1, centre + 0.1, centre - 0.1])
        assert all(0 <= a <= 1 for a in answers)


def test_an_integer_scale_moves_by_the_spread_of_its_range_rounded():
    for key in KEYS:
        answers = [schema_answer(SCALE, key, repeat=n, spread=0.25)["score"] for n in range(3)]
        assert all(isinstance(a, int) and 1 <= a <= 5 for a in answers)
        assert answers[0] - answers[1] == 2 and answers[2] == answers[0]  # +1 step, -1 step


def test_booleans_and_text_do_not_move_and_no_spread_means_the_same_answer():
    for key in KEYS[:20]:
        assert schema_answer(PASS_FAIL, key, repeat=1, spread=0.3) == schema_answer(PASS_FAIL, key)
        assert schema_answer(SCORE, key, repeat=3) == schema_answer(SCORE, key)
        moved = schema_answer(SCORE, key, repeat=1, spread=0.2)
        assert moved["reasoning"] == schema_answer(SCORE, key)["reasoning"]


def test_through_the_api_each_answered_call_is_the_next_repeat_and_a_repair_repeats_it(client, fake):
    fake.configure(repeat_spread=0.1)
    output_config = {"format": {"type": "json_schema", "schema": SCORE}}

    def ask(messages):  # type: ignore[no-untyped-def]
        reply = client.messages.create(model=MODEL, max_tokens=512, messages=messages, output_config=output_config)
        return json.loads(reply.content[0].text)["score"]

    first = [{"role": "user", "content": "grade item 7"}]
    a, b = ask(first), ask(first)
    assert a - b == pytest.approx(0.2)
    repaired = ask([*first, {"role": "assistant", "content": "{"}, {"role": "user", "content": "fix it"}])
    assert repaired == pytest.approx(b), "a repair answers like the call it repairs"
    assert ask(first) == pytest.approx(a)
    other = [{"role": "user", "content": "grade item 8"}]  # another item key starts at repeat 0
    assert ask(other) - ask(other) == pytest.approx(0.2)
    fake.configure(repeat_spread=0.0)
    assert ask(first) == ask(first)
