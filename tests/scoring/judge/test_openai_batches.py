"""OpenAI's Batch API as the batch lane uses it (``OpenAIBatches``: line, submit, poll, collect), against
the OpenAI fake through the real ``openai`` SDK: a JSONL file up, a batch through its states, the
output and error files down; expired and errored requests, a file the provider refuses, and the
Anthropic lane's same interface beside it."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from assay.scoring.judge.prompt import JudgePrompt
from assay.scoring.judge.providers.anthropic_messages import AnthropicBatches
from assay.scoring.judge.providers.anthropic_messages import (
    make_batch_client as anthropic_batch_client,
)
from assay.scoring.judge.providers.base import BatchResult, Call
from assay.scoring.judge.providers.openai_chat import OpenAIBatches, make_batch_client
from assay.scoring.judge.rubrics import VerdictSpec, rubric_verdict
from assay.scoring.judge.service import read_answer
from assay.scoring.suites.providers import ProviderConfig
from tests.conftest import wait_for
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI

VERDICT = rubric_verdict(VerdictSpec(type="scale", min=1, max=5)).model


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeOpenAI) -> FakeOpenAI:
    fake_server.reset()
    return fake_server


@pytest.fixture
def batches(fake: FakeOpenAI) -> Iterator[OpenAIBatches]:
    client = make_batch_client("test-key", fake.api_base, timeout=10.0)
    yield OpenAIBatches("openai", ProviderConfig(type="openai_compatible", default_model="gpt-4.1-mini"), client)
    client.close()


def call(n: int, model: str = "gpt-4.1-mini", **parameters: object) -> Call:
    prompt = JudgePrompt(system="You grade answers to arithmetic questions.", user=f"What is {n} + {n}? Answer: {2 * n}")
    return Call(model, prompt, [{"role": "user", "content": prompt.user}], 256, 0.0, VERDICT, parameters)


def ended(api: OpenAIBatches | AnthropicBatches, provider_id: str, seen: list[str]):  # type: ignore[no-untyped-def]
    def poll():  # type: ignore[no-untyped-def]
        state = api.poll(provider_id)
        if not seen or seen[-1] != state.status:
            seen.append(state.status)
        return state if state.ended else None

    return wait_for(poll, timeout=30, interval=0.05, message=f"provider batch {provider_id} to end")


def by_id(results: Iterator[BatchResult]) -> dict[str, BatchResult]:
    return {result.custom_id: result for result in results}


def test_a_batch_goes_up_as_a_jsonl_file_and_its_answers_come_back(batches, fake):
    fake.configure(batch_processing_seconds=1.0)
    lines = [batches.line(f"score-{n}", call(n, seed=3)) for n in range(4)]
    assert lines[0]["method"] == "POST" and lines[0]["url"] == "/v1/chat/completions"
    assert lines[0]["body"]["response_format"]["type"] == "json_schema" and lines[0]["body"]["seed"] == 3
    assert lines[0]["body"]["max_completion_tokens"] == 256 and lines[0]["body"]["messages"][0]["role"] == "system"

    provider_id = batches.submit(lines)
    seen: list[str] = []
    state = ended(batches, provider_id, seen)
    assert seen[0] == "validating" and "in_progress" in seen and seen[-1] == "completed", seen
    assert state.counts == {"total": 4, "completed": 4, "failed": 0} and state.error is None

    results = by_id(batches.collect(provider_id))
    assert sorted(results) == [f"score-{n}" for n in range(4)]
    for result in results.values():
        assert result.answer is not None and result.problem is None
        _, verdict, problem = read_answer(result.answer, VERDICT, 256)
        assert verdict is not None and problem is None and 1 <= verdict.score <= 5
        assert result.answer.usage["input_tokens"] > 0 and result.answer.usage["output_tokens"] > 0
    api = fake.calls()["batch_api"]
    assert api["upload"] == 1 and api["create"] == 1 and api["content"] == 1, "one output file, no error file"
    # The same requests and answers as the realtime lane: the fake's answer is a function of the prompt.
    assert all(c["lane"] == "batch" and c["request"]["seed"] == 3 for c in fake.calls()["calls"])


def test_errored_and_expired_requests_come_back_with_why_from_the_error_file(batches, fake):
    fake.batch_outcomes({"b": "errored", "c": "expired", "d": "truncated"})
    lines = [batches.line(custom_id, call(n)) for n, custom_id in enumerate("abcd")]
    provider_id = batches.submit(lines)
    state = ended(batches, provider_id, [])
    # One expired request makes the provider batch end expired; what was answered is still answered.
    assert state.status == "expired" and state.counts == {"total": 4, "completed": 2, "failed": 2}

    results = by_id(batches.collect(provider_id))
    assert results["a"].answer is not None
    assert results["b"].answer is None and results["b"].problem.startswith("request errored (500: ")
    assert results["c"].answer is None and results["c"].problem.startswith("request expired (batch_expired: ")
    # A cut answer is an answer: the lane reads it like the realtime lane (and sends it realtime).
    assert results["d"].answer is not None and results["d"].answer.stop == "max_tokens"
    assert "cut off" in read_answer(results["d"].answer, VERDICT, 256)[2]


def test_a_request_the_model_does_not_take_errors_with_the_providers_message(batches, fake):
    provider_id = batches.submit([batches.line("hot", call(1, model="gpt-5-mini", temperature=0.5))])
    ended(batches, provider_id, [])
    (result,) = batches.collect(provider_id)
    assert result.answer is None and "temperature" in result.problem and "400" in result.problem
    assert fake.calls()["total"] == 0, "refused before any model call"


def test_a_file_with_two_models_fails_as_a_whole(batches, fake):
    lines = [batches.line("one", call(1)), batches.line("two", call(2, model="gpt-4.1-nano"))]
    provider_id = batches.submit(lines)
    state = ended(batches, provider_id, [])
    assert state.status == "failed" and "mismatched_model" in state.error and "one model only" in state.error
    assert list(batches.collect(provider_id)) == [], "a failed provider batch has no results"


def test_discard_deletes_the_input_output_and_error_files_of_an_ended_batch(batches, fake):
    fake.batch_outcomes({"b": "errored"})
    provider_id = batches.submit([batches.line(custom_id, call(n)) for n, custom_id in enumerate("ab")])
    ended(batches, provider_id, [])
    remote = batches.client.batches.retrieve(provider_id)
    files = {remote.input_file_id, remote.output_file_id, remote.error_file_id}
    assert None not in files and {f.id for f in batches.client.files.list()} == files
    list(batches.collect(provider_id))

    batches.discard(provider_id)
    assert list(batches.client.files.list()) == []
    assert fake.calls()["batch_api"]["delete_file"] == 3
    batches.discard(provider_id)  # deleted already: nothing raised
    with pytest.raises(openai.NotFoundError):
        batches.client.files.delete(remote.input_file_id)


def test_discard_of_a_failed_batch_deletes_its_input_file(batches, fake):
    provider_id = batches.submit([batches.line("one", call(1)), batches.line("two", call(2, model="gpt-4.1-nano"))])
    assert ended(batches, provider_id, []).status == "failed"
    batches.discard(provider_id)
    assert list(batches.client.files.list()) == []


def test_discard_never_raises_when_the_provider_cannot_be_reached(caplog):
    client = make_batch_client("test-key", "http://127.0.0.1:9/v1", timeout=1.0)  # port 9: nothing listens
    unreachable = OpenAIBatches("openai", ProviderConfig(type="openai_compatible", default_model="gpt-4.1-mini"), client)
    unreachable.discard("batch_gone")
    client.close()
    assert "provider batch batch_gone: its files were not deleted: openai connection error" in caplog.text


def test_the_anthropic_lane_offers_the_same_interface():
    with FakeAnthropic(batch_processing_seconds=0.2) as fake:
        client = anthropic_batch_client("test-key", fake.base_url, timeout=10.0)
        api = AnthropicBatches("anthropic", client)
        fake.batch_outcomes({"x": "expired"})
        anthropic_call = call(1, model="claude-haiku-5-5")
        line = api.line("w", anthropic_call)
        assert line["params"]["system"][0]["cache_control"] == {"type": "ephemeral"}
        provider_id = api.submit([line, api.line("x", anthropic_call)])
        state = ended(api, provider_id, [])
        assert state.status == "ended" and state.counts["succeeded"] == 1 and state.counts["expired"] == 1
        results = by_id(api.collect(provider_id))
        assert results["w"].answer is not None and results["x"].problem == "request expired"
        client.close()
