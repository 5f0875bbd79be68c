"""Long sessions: measured before judging; oldest tool outputs cut first and recorded; or a clear failure."""

from __future__ import annotations

import pytest

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import uuid
from datetime import UTC, datetime

from assay.scoring.judge.governor import estimate_tokens
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.alert_session import (
    SAFETY_RATIO,
    JudgeOutputSchema,
    SessionNotCompleted,
    SessionTooLong,
    input_budget,
    prepare_judge,
)
from assay.scoring.metrics.registry import MetricContext
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.scorer import WorkUnit, compute
from assay.scoring.sessions.items import AlertSessionItem
from assay.scoring.suites.loader import load_suite
from tests.conftest import REPO
from tests.scoring.sessions.helpers import judge_runtime

TEMPLATE = "Judge this.\n{{SESSION_CONVERSATION}}\nAlert:\n{{ALERT_DATA}}\n{{OUTPUT_SCHEMA}}"


def long_session(outputs: int = 4, size: int = 8000) -> AlertSessionItem:
    conversation: list[dict] = [{"type": "message", "role": "user", "content": "Investigate."}]
    for i in range(outputs):
        conversation.append({"type": "message", "role": "assistant", "content": f"Step {i}: calling tool {i}."})
        conversation.append({"type": "tool_call", "tool_name": f"tool-{i}", "arguments": {"i": i}, "result": f"out{i} " * (size // 5)})
    conversation.append({"type": "message", "role": "assistant", "content": "Done."})
    return AlertSessionItem.model_validate(
        {"session_id": "long", "status": "completed", "alert_data": {"a": 1}, "conversation": conversation, "final_analysis": "X."}
    )


def fit(item: AlertSessionItem, context_window: int, max_tokens: int = 1000):
    return prepare_judge(
        item, template=TEMPLATE, verdict_model=JudgeOutputSchema, model="m", max_tokens=max_tokens, context_window=context_window
    )


def test_budget_leaves_room_for_the_answer_the_template_and_the_schema():
    budget = input_budget(TEMPLATE, JudgeOutputSchema, max_tokens=1000, context_window=100_000)
    assert budget < int(99_000 * SAFETY_RATIO)
    assert int(99_000 * SAFETY_RATIO) - budget > 300  # the schema text is counted


def test_a_session_that_fits_is_sent_whole_and_measured():
    item = long_session()
    inputs, notes = fit(item, 200_000)
    record = notes["judge_input"]
    assert record["truncated"] is False and record["estimated_tokens"] <= record["budget_tokens"]
    assert "omitted" not in inputs["SESSION_CONVERSATION"] and "out3 out3" in inputs["SESSION_CONVERSATION"]
    assert notes["session_facts"]["tool_calls"] == 4


def test_oldest_tool_outputs_are_cut_first_and_recorded():
    item = long_session(outputs=4, size=8000)  # ~2000 tokens per output
    whole = fit(item, 200_000)[1]["judge_input"]["estimated_tokens"]
    # Room for everything but about two outputs.
    window = int((whole - 3500 + estimate_tokens(TEMPLATE) + 1500) / SAFETY_RATIO) + 1000
    inputs, notes = fit(item, window)
    record = notes["judge_input"]
    assert record["truncated"] is True and record["rule"] == "oldest tool outputs first"
    assert record["tool_outputs_total"] == 4 and record["tool_outputs_elided"] == 2
    assert record["elided_entries"] == [3, 5]  # the first two tool calls (1-based conversation positions)
    assert record["estimated_tokens_before"] == whole and record["estimated_tokens"] <= record["budget_tokens"]
    text = inputs["SESSION_CONVERSATION"]
    assert "out0" not in text and "out1" not in text and "out2 out2" in text and "out3 out3" in text
    assert text.count("[tool output omitted to fit the judge's context window:") == 2
    assert "TOOL CALL tool-0" in text and "Step 0" in text and "Done." in text  # calls and messages are kept
    assert estimate_tokens(text) + estimate_tokens(inputs["ALERT_DATA"]) <= record["budget_tokens"] + 5


def test_a_session_too_long_even_without_tool_outputs_fails_clearly():
    item = AlertSessionItem.model_validate(
        {"session_id": "huge", "status": "completed", "alert_data": {}, "final_analysis": "word " * 40_000,
         "conversation": [{"tool_name": "t", "result": "r" * 1000}]}
    )
    with pytest.raises(SessionTooLong) as caught:
        fit(item, 20_000)
    message = caught.value.message
    assert "session huge is too long for judge model m" in message and "oldest tool outputs first" in message
    assert caught.value.details["judge_input"]["tool_outputs_elided"] == 1


def test_a_session_not_completed_is_not_judged():
    item = long_session().model_copy(update={"status": "in_progress"})
    with pytest.raises(SessionNotCompleted, match="'in_progress', not completed"):
        fit(item, 200_000)


def test_the_scorer_fails_the_judge_component_with_that_message_and_calls_no_judge(monkeypatch):
    called = []

    async def run_judge(*args, **kwargs):
        called.append(1)

    monkeypatch.setattr("assay.scoring.judge.service.run_judge", run_judge)
    suite = load_suite(REPO / "config", "alert_session")
    small = suite.criteria.model_copy(
        update={"judge": suite.criteria.judge.model_copy(update={"prompt": TEMPLATE})}
    )
    runtime = judge_runtime()
    runtime.catalog = runtime.catalog.model_copy(deep=True)  # the loaded catalog is cached: never edit it
    runtime.catalog.models[small.judge.model] = runtime.catalog.models[small.judge.model].model_copy(update={"context_window": 20_000})
    item = AlertSessionItem.model_validate(
        {"session_id": "huge", "status": "completed", "alert_data": {}, "final_analysis": "word " * 40_000}
    )
    work = WorkUnit(
        ref=ComponentRef(uuid.uuid4(), "judge", "judge"),
        criteria_hash=small.criteria_hash,
        criteria=small,
        kind=get_kind("alert_session"),
        item=item,
        context=MetricContext(now=datetime.now(UTC)),
        judge_timeout=60,
    )
    result = compute(work, runtime)
    assert result.status == "failed" and "too long for judge model" in result.reason
    assert result.details["judge_input"]["context_window"] == 20_000 and "session_facts" in result.details
    assert called == []
