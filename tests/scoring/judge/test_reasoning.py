"""Reasoning models on the OpenAI API, against the fake through the real SDK: ``max_completion_tokens``
(the room for reasoning and answer together) is sent in place of ``max_tokens`` and admitted against
the token limit in full; reasoning tokens are billed as output and kept apart in the usage; an answer
a reasoning model cut off before any text is repaired once, then failed naming the limit it hit."""

from __future__ import annotations

import pytest

from assay.scoring.judge.governor import InProcessGovernor
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.service import cost_usd
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import REPO_ROOT
from tests.scoring.judge.conftest import ProviderCase, openai_provider
from tests.scoring.judge.test_providers import judge, request_for

MODEL = "gpt-5-nano"


class Admissions(InProcessGovernor):
    """The governor, recording the tokens each call was admitted for."""

    def __init__(self) -> None:
        super().__init__({})
        self.tokens: list[int] = []

    def acquire(self, model: str, tokens: int, requests: int = 1) -> float:
        self.tokens.append(tokens)
        return super().acquire(model, tokens, requests)


@pytest.fixture
def case(fake_openai):
    provider = openai_provider(fake_openai)
    yield ProviderCase("openai", fake_openai, provider, MODEL, load_model_catalog(REPO_ROOT / "config").models[MODEL])
    judge_loop().run(provider.close())


def test_max_completion_tokens_is_sent_and_admitted_and_reasoning_is_billed_as_output(case):
    case.fake.configure(reasoning_tokens=500)
    admissions = Admissions()
    parameters = {"reasoning_effort": "high", "max_completion_tokens": 6000}
    outcome = judge(case, request_for(case, "a", max_tokens=512, parameters=parameters), governor=admissions)

    assert outcome.verdict is not None and outcome.calls == 1
    [call] = case.fake.calls()["calls"]
    assert call["request"]["max_completion_tokens"] == 6000 and "max_tokens" not in call["request"]
    assert call["request"]["reasoning_effort"] == "high"
    # OpenAI counts a request's whole completion room against its token limit: so does the admission.
    assert len(admissions.tokens) == 1 and admissions.tokens[0] > 6000
    assert outcome.usage["reasoning_tokens"] == 500 and outcome.usage["output_tokens"] > 500
    assert outcome.cost_usd == pytest.approx(cost_usd(outcome.usage, case.price))
    assert outcome.cost_usd > 500 * case.price.output_per_mtok / 1e6, "the reasoning is paid for"


def test_without_max_completion_tokens_the_answers_limit_is_max_tokens(case):
    admissions = Admissions()
    outcome = judge(case, request_for(case, "a", max_tokens=700), governor=admissions)

    assert outcome.verdict is not None
    [call] = case.fake.calls()["calls"]
    assert call["request"]["max_completion_tokens"] == 700
    assert 700 < admissions.tokens[0] < 6000
    assert "reasoning_tokens" not in outcome.usage, "no reasoning reported, none recorded"


def test_a_reasoning_model_cut_off_at_max_completion_tokens_is_repaired_once_then_fails_naming_it(case):
    case.fake.script({"kind": "reasoning_cutoff", "times": 2})
    parameters = {"max_completion_tokens": 900}
    outcome = judge(case, request_for(case, "a", max_tokens=300, parameters=parameters))

    assert outcome.verdict is None and outcome.repaired and outcome.calls == 2
    assert outcome.failure == (
        "unusable answer after one repair attempt: the answer was cut off at max_completion_tokens=900 "
        "before any text (reasoning used it up)"
    )
    assert outcome.usage["output_tokens"] == 1800 and outcome.usage["reasoning_tokens"] == 1800, "both calls billed"


def test_a_partial_answer_cut_by_length_is_repaired_and_lands(case):
    case.fake.script({"kind": "truncated"})
    outcome = judge(case, request_for(case, "a", parameters={"max_completion_tokens": 2048}))

    assert outcome.verdict is not None and outcome.repaired and outcome.calls == 2
    assert [c["repair"] for c in case.fake.calls()["calls"]] == [False, True]
