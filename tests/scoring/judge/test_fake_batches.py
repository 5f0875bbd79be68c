"""The fake's Message Batches API, driven through the real SDK: lifecycle, scripted outcomes, cancel,
validation, and that a batch verdict is the realtime one, counted against the same item."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pydantic
import pytest
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse, MessageBatchSucceededResult

from assay.scoring.judge.providers.anthropic_messages import output_config_for
from assay.scoring.kinds.kql import KqlGrade
from tests.fakes.anthropic_server import FakeAnthropic
from tests.scoring.judge.conftest import MODEL

SYSTEM = [{"type": "text", "text": "rubric " * 1000, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture
def sdk(fake: FakeAnthropic) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0, timeout=10)
    yield client
    client.close()


def params(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": text}],
        "output_config": output_config_for(KqlGrade),
        **extra,
    }


def requests(*custom_ids: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"custom_id": cid, "params": params(f"item {cid}", **extra)} for cid in custom_ids]


def wait_ended(sdk: anthropic.Anthropic, batch_id: str, timeout: float = 10) -> MessageBatch:
    deadline = time.monotonic() + timeout
    while (batch := sdk.messages.batches.retrieve(batch_id)).processing_status != "ended":
        assert time.monotonic() < deadline, f"batch still {batch.processing_status}"
        time.sleep(0.05)
    return batch


def results(sdk: anthropic.Anthropic, batch_id: str) -> dict[str, MessageBatchIndividualResponse]:
    return {line.custom_id: line for line in sdk.messages.batches.results(batch_id)}


def key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_batch_lives_in_progress_then_ends_with_results_in_another_order(sdk, fake):
    fake.configure(batch_processing_seconds=0.4)
    ids = ["a", "b", "c", "d", "e"]
    started = time.monotonic()
    created = sdk.messages.batches.create(requests=requests(*ids))

    assert created.id.startswith("msgbatch_") and created.type == "message_batch"
    assert created.processing_status == "in_progress"
    assert created.request_counts.model_dump() == {
        "processing": 5, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0
    }
    assert created.results_url is None and created.ended_at is None and created.cancel_initiated_at is None
    assert (created.expires_at - created.created_at).total_seconds() == 24 * 3600
    assert sdk.messages.batches.retrieve(created.id).processing_status == "in_progress"
    with pytest.raises(anthropic.AnthropicError, match="No `results_url`"):
        sdk.messages.batches.results(created.id)

    ended = wait_ended(sdk, created.id)
    assert time.monotonic() - started >= 0.4
    assert ended.request_counts.model_dump() == {
        "processing": 0, "succeeded": 5, "errored": 0, "canceled": 0, "expired": 0
    }
    assert ended.ended_at is not None and ended.ended_at >= ended.created_at
    assert ended.results_url == f"{fake.base_url}/v1/messages/batches/{created.id}/results"

    lines = list(sdk.messages.batches.results(created.id))
    assert sorted(line.custom_id for line in lines) == ids
    assert [line.custom_id for line in lines] != ids  # callers must match by custom_id
    for line in lines:
        assert isinstance(line.result, MessageBatchSucceededResult)
        KqlGrade.model_validate_json(line.result.message.content[0].text, strict=True)


def test_async_client_reads_results(fake):
    fake.configure(batch_processing_seconds=0)

    async def run() -> list[str]:
        async with anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=0) as client:
            batch = await client.messages.batches.create(requests=requests("x", "y"))
            return [line.result.type async for line in await client.messages.batches.results(batch.id)]

    assert asyncio.run(run()) == ["succeeded", "succeeded"]


def test_results_before_the_end_are_refused(sdk, fake):
    fake.configure(batch_processing_seconds=5)
    batch = sdk.messages.batches.create(requests=requests("a"))
    with pytest.raises(anthropic.BadRequestError, match="has not ended"):
        sdk.get(f"/v1/messages/batches/{batch.id}/results", cast_to=object)
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.batches.retrieve("msgbatch_unknown")


def test_scripted_outcomes(sdk, fake):
    fake.configure(batch_processing_seconds=0)
    pending = fake.batch_outcomes(
        {"b": "errored", "c": "malformed", "d": "out_of_range", "f": "truncated"}, every_nth=5, nth_outcome="expired"
    )
    assert pending["every_nth"] == {"n": 5, "outcome": "expired"} and pending["outcomes"]["b"] == "errored"

    batch = sdk.messages.batches.create(requests=requests("a", "b", "c", "d", "e", "f", max_tokens=40))
    by_id = results(sdk, batch.id)
    assert {cid: line.result.type for cid, line in by_id.items()} == {
        "a": "succeeded",
        "b": "errored",
        "c": "succeeded",
        "d": "succeeded",
        "e": "expired",
        "f": "succeeded",
    }
    counts = sdk.messages.batches.retrieve(batch.id).request_counts
    assert (counts.succeeded, counts.errored, counts.expired, counts.canceled) == (4, 1, 1, 0)
    assert by_id["b"].result.error.error.type == "api_error"
    KqlGrade.model_validate_json(by_id["a"].result.message.content[0].text, strict=True)
    for cid in ("c", "d"):  # what the caller's validation must reject
        with pytest.raises(pydantic.ValidationError):
            KqlGrade.model_validate_json(by_id[cid].result.message.content[0].text, strict=True)
    assert by_id["f"].result.message.stop_reason == "max_tokens"

    # custom_id outcomes were used up by that batch; the every_nth rule stays until cleared.
    assert fake.batch_outcomes()["outcomes"] == {}
    again = sdk.messages.batches.create(requests=requests("a", "b", "c", "d", "e"))
    assert [line.result.type for line in results(sdk, again.id).values()].count("succeeded") == 4
    fake._http.post("/_fake/batch_outcomes", json={"every_nth": None}).raise_for_status()
    third = sdk.messages.batches.create(requests=requests("a", "b", "c", "d", "e"))
    assert {line.result.type for line in results(sdk, third.id).values()} == {"succeeded"}


def test_bad_outcome_is_refused(fake):
    response = fake._http.post("/_fake/batch_outcomes", json={"outcomes": {"a": "exploded"}})
    assert response.status_code == 422


def test_batch_verdict_equals_the_realtime_one(sdk, fake):
    fake.configure(batch_processing_seconds=0)
    realtime = sdk.messages.create(**params("judge this query", system=SYSTEM))
    batch = sdk.messages.batches.create(
        requests=[{"custom_id": "q1", "params": params("judge this query", system=SYSTEM)}]
    )
    batched = results(sdk, batch.id)["q1"].result.message

    assert batched.content[0].text == realtime.content[0].text
    assert batched.stop_reason == realtime.stop_reason == "end_turn"
    assert batched.usage.output_tokens == realtime.usage.output_tokens
    assert batched.usage.input_tokens == realtime.usage.input_tokens
    # The realtime call wrote the cached system prefix; the batch request reads it.
    assert realtime.usage.cache_creation_input_tokens == len("rubric " * 1000) // 4
    assert batched.usage.cache_read_input_tokens == realtime.usage.cache_creation_input_tokens
    assert batched.usage.cache_creation_input_tokens == 0


def test_calls_are_counted_per_item_across_lanes(sdk, fake):
    fake.configure(batch_processing_seconds=0)
    sdk.messages.create(**params("item a"))
    fake.batch_outcomes({"b": "errored", "c": "expired"})
    reqs = requests("a", "b", "c") + [{"custom_id": "d", "params": params("item d", temperature=0.0)}]
    batch = sdk.messages.batches.create(requests=reqs)

    report = fake.calls()  # ends the batch itself: no poll needed before counting
    assert report["counts"] == {key("item a"): 2, key("item b"): 1}
    assert report["by_lane"] == {"realtime": {key("item a"): 1}, "batch": {key("item a"): 1, key("item b"): 1}}
    assert report["answered"] == {key("item a"): 2}
    realtime, *batched = report["calls"]
    assert (realtime["lane"], realtime["batch_id"], realtime["custom_id"]) == ("realtime", None, None)
    assert [(c["lane"], c["batch_id"], c["custom_id"], c["status"]) for c in batched] == [
        ("batch", batch.id, "a", 200),
        ("batch", batch.id, "b", 500),
    ]

    # Invalid params end errored, as /v1/messages would refuse them, and never reach a model.
    refused = results(sdk, batch.id)["d"].result
    assert refused.type == "errored" and refused.error.error.type == "invalid_request_error"
    assert refused.error.error.message == "temperature: Extra inputs are not permitted"
    batch_api = {"create": 1, "retrieve": 1, "list": 0, "results": 1, "cancel": 0, "delete": 0}
    assert fake.calls()["batch_api"] == batch_api  # results() retrieves the batch first


def test_realtime_script_does_not_reach_batches(sdk, fake):
    fake.configure(batch_processing_seconds=0)
    fake.script({"kind": "overloaded"})
    batch = sdk.messages.batches.create(requests=requests("a"))
    assert results(sdk, batch.id)["a"].result.type == "succeeded"
    with pytest.raises(anthropic.OverloadedError):
        sdk.messages.create(**params("item a"))


def test_cancel_at_once_cancels_every_request(sdk, fake):
    fake.configure(batch_processing_seconds=3, batch_cancel_seconds=0.2)
    batch = sdk.messages.batches.create(requests=requests("a", "b", "c", "d"))
    canceling = sdk.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
    assert sdk.messages.batches.retrieve(batch.id).processing_status == "canceling"

    ended = wait_ended(sdk, batch.id, timeout=2)  # long before the 3 s of processing
    assert ended.request_counts.canceled == 4 and ended.request_counts.processing == 0
    assert {line.result.type for line in results(sdk, batch.id).values()} == {"canceled"}
    assert fake.calls()["total"] == 0
    assert sdk.messages.batches.cancel(batch.id).processing_status == "ended"  # too late: left as it is


def test_cancel_midway_keeps_what_finished(sdk, fake):
    # One request finishes a second: after the first second's wait, the cancel has 9 s to arrive before
    # the whole batch is done (a 2 s batch left a loaded machine only 1 s).
    fake.configure(batch_processing_seconds=10, batch_cancel_seconds=0)
    ids = [f"r{i}" for i in range(10)]
    batch = sdk.messages.batches.create(requests=requests(*ids))
    time.sleep(1.0)  # the fake's processing is a function of time: this is the time it needs, not a wait for an event
    assert sdk.messages.batches.cancel(batch.id).processing_status == "ended"

    by_id = results(sdk, batch.id)
    types = [by_id[cid].result.type for cid in ids]
    done = types.count("succeeded")
    assert 0 < done < 10
    assert types == ["succeeded"] * done + ["canceled"] * (10 - done)  # requests finish in order
    assert fake.calls()["total"] == done


def test_delete_only_once_ended(sdk, fake):
    fake.configure(batch_processing_seconds=0.3)
    batch = sdk.messages.batches.create(requests=requests("a"))
    with pytest.raises(anthropic.BadRequestError, match="in_progress"):
        sdk.messages.batches.delete(batch.id)
    wait_ended(sdk, batch.id)
    deleted = sdk.messages.batches.delete(batch.id)
    assert (deleted.id, deleted.type) == (batch.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.batches.retrieve(batch.id)


@pytest.mark.parametrize(
    ("reqs", "match"),
    [
        (requests("a", "b", "a"), "unique"),
        (requests("has space"), "custom_id"),
        (requests("x" * 65), "custom_id"),
        ([], "requests"),
        ([{"custom_id": "a"}], "params"),
    ],
)
def test_invalid_batches_are_refused(sdk, fake, reqs, match):
    with pytest.raises(anthropic.BadRequestError, match=match) as caught:
        sdk.messages.batches.create(requests=reqs)
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert sdk.messages.batches.list().data == []


def test_at_most_100000_requests(sdk, fake):
    small = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    reqs = [{"custom_id": f"r{i}", "params": small} for i in range(100_001)]
    with pytest.raises(anthropic.BadRequestError, match="at most 100000"):
        sdk.messages.batches.create(requests=reqs)


def test_list_is_newest_first_and_pages(sdk, fake):
    made = [sdk.messages.batches.create(requests=requests("a")).id for _ in range(3)]
    first = sdk.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    assert [b.id for b in sdk.messages.batches.list(limit=2)] == made[::-1]  # the SDK follows after_id


def test_reset_forgets_batches_and_outcomes(sdk, fake):
    fake.configure(batch_processing_seconds=0)
    old = sdk.messages.batches.create(requests=requests("a"))
    fake.batch_outcomes({"a": "errored"}, every_nth=1)
    fake.reset()

    report = fake.calls()
    assert report["total"] == 0 and set(report["batch_api"].values()) == {0}
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.batches.retrieve(old.id)
    assert sdk.messages.batches.list().data == []
    assert fake.batch_outcomes() == {"outcomes": {}, "every_nth": None}
    assert fake.configure()["batch_processing_seconds"] == 0.5
    new = sdk.messages.batches.create(requests=requests("a"))
    assert new.processing_status == "in_progress"
    assert results(sdk, wait_ended(sdk, new.id).id)["a"].result.type == "succeeded"
