"""The alert_session kind: item model, what the judge sees, facts, the EP's verdict schema, the suite."""

from __future__ import annotations

import pytest

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import json
import shutil
from pathlib import Path

import anthropic
from pydantic import ValidationError

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.prompt import render_prompt, template_placeholders
from assay.scoring.judge.verdicts import verdict_type
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.alert_session import (
    JudgeOutputSchema,
    render_alert,
    render_conversation,
    session_facts,
)
from assay.scoring.sessions.items import AlertSessionItem, ChatMessage, ToolCall, normalize_tool_name
from assay.scoring.suites.loader import load_suite
from tests.conftest import REPO
from tests.scoring.sessions.helpers import VERDICT, example_sessions, make_session

CONFIG = REPO / "config"


def test_item_model_reads_messages_and_tool_calls_with_or_without_a_type_tag():
    raw = make_session()
    for entry in raw["conversation"]:
        entry.pop("type")
    item = AlertSessionItem.model_validate(raw)
    kinds = [type(e) for e in item.conversation]
    assert kinds == [ChatMessage, ChatMessage, ChatMessage, ToolCall, ChatMessage, ToolCall, ChatMessage, ToolCall, ChatMessage]
    assert item.conversation[3].failed and not item.conversation[5].failed
    assert item.completed


def test_item_model_normalises_and_refuses():
    item = AlertSessionItem.model_validate(make_session(status=" Completed ", available_tools=["a", {"name": "b", "server": "s"}]))
    assert item.status == "completed" and [t.name for t in item.available_tools] == ["a", "b"]
    with pytest.raises(ValidationError):
        AlertSessionItem.model_validate(make_session(unexpected=1))
    with pytest.raises(ValidationError, match="ended_at is before started_at"):
        AlertSessionItem.model_validate(make_session(ended_at="2025-12-05T09:00:00Z"))
    with pytest.raises(ValidationError):
        AlertSessionItem.model_validate(make_session(session_id="bad\nid"))
    with pytest.raises(ValidationError):
        AlertSessionItem.model_validate({**make_session(), "alert_data": None})


def test_a_tool_call_fails_by_error_or_by_success_false():
    assert ToolCall(tool_name="t", error="boom").failed
    assert ToolCall(tool_name="t", success=False).failed
    assert not ToolCall(tool_name="t", error="warning only", success=True).failed
    assert not ToolCall(tool_name="t", result="ok").failed


def test_session_facts():
    facts = session_facts(AlertSessionItem.model_validate(example_sessions()[0]))
    assert facts == {
        "facts_version": 1,
        "messages": 6,
        "iterations": 4,
        "tool_calls": 3,
        "failed_tool_calls": 1,
        "distinct_tools_used": 3,
        "available_tools": 8,
        "available_tools_used": 3,
        "tools_used": ["cpu-usage", "pods_get", "pods_list"],
        "unused_available_tools": ["events_list", "list-files", "list-processes-in-pod", "pods_log", "read-file"],
        "unlisted_tools_used": [],
        "duration_seconds": 21.0,
    }
    bare = session_facts(AlertSessionItem.model_validate({"session_id": "x", "status": "completed", "alert_data": {}}))
    assert bare["tool_calls"] == 0 and bare["duration_seconds"] is None and bare["unlisted_tools_used"] == []


def test_conversation_rendering_holds_every_entry_tools_and_final_analysis():
    item = AlertSessionItem.model_validate(example_sessions()[0])
    text = render_conversation(item)
    assert text.startswith("Session 7c9e6679-7425-40de-944b-e07fc1f90ae7 (status: completed)")
    assert "Available tools (8):" in text and "- forensics-server.read-file: Read a file" in text
    assert "### [4] TOOL CALL kubernetes-server.pods_get (FAILED, 85 ms)" in text
    assert 'Error: pods "miner-7f9c" not found' in text
    assert '"avg_cores": 3.9' in text  # a JSON result, indented
    assert text.index("[1] SYSTEM") < text.index("[9] ASSISTANT") < text.index("### Final analysis")
    assert "Classification: MALICIOUS" in text
    alert = render_alert(item)
    assert alert.startswith("Alert type: SuspiciousBinary\n") and json.loads(alert.split("\n", 1)[1])["binary"] == "/tmp/xmrig"


def test_the_prompt_is_the_eps_poc_prompt_with_its_three_placeholders():
    prompt = (CONFIG / "prompts" / "alert_session_judge.md").read_text()
    assert template_placeholders(prompt) == ["SESSION_CONVERSATION", "ALERT_DATA", "OUTPUT_SCHEMA"]
    assert prompt.startswith("You are a computer security expert specializing in DevOps and Kubernetes security operations.\n")
    assert "## SESSION DATA" in prompt and prompt.endswith("## OUTPUT FORMAT\n\n{{OUTPUT_SCHEMA}}\n")
    item = AlertSessionItem.model_validate(example_sessions()[0])
    rendered = render_prompt(prompt, get_kind("alert_session").judge_inputs(item), JudgeOutputSchema, model="m", min_cacheable_tokens=0)
    # The criteria preamble (cached) comes before the session; the schema is filled in at the end.
    assert rendered.system.rstrip().endswith("The conversation includes all MCP tool interactions and their results.")
    assert "{{" not in rendered.user and '"total_score"' in rendered.user and "Original Alert:" in rendered.user


def test_verdict_schema_is_the_eps_with_named_dimensions_and_strict():
    assert verdict_type("alert_session_judge").model is JudgeOutputSchema
    schema = anthropic.transform_schema(JudgeOutputSchema)
    assert set(schema["properties"]) == {"total_score", "score_breakdown", "score_reasoning", "missing_tools", "alternative_approaches"}
    breakdown = schema["$defs"]["ScoreBreakdown"]
    assert set(breakdown["properties"]) == {"logical_flow", "consistency", "tool_relevance", "synthesis_quality"}
    assert breakdown["additionalProperties"] is False  # no free-form object anywhere
    assert set(schema["$defs"]["MissingTool"]["properties"]) == {"tool_name", "rationale"}
    assert set(schema["$defs"]["AlternativeApproach"]["properties"]) == {"name", "description", "steps"}
    verdict = JudgeOutputSchema.model_validate_json(json.dumps(VERDICT), strict=True)
    assert verdict.total_score == 67
    for bad in (
        {**VERDICT, "total_score": 101},
        {**VERDICT, "score_breakdown": {**VERDICT["score_breakdown"], "logical_flow": 26}},
        {**VERDICT, "score_breakdown": {**VERDICT["score_breakdown"], "novelty": 3}},
        {**VERDICT, "total_score": "67"},
    ):
        with pytest.raises(ValidationError):
            JudgeOutputSchema.model_validate_json(json.dumps(bad), strict=True)
    minimal = JudgeOutputSchema.model_validate({k: VERDICT[k] for k in ("total_score", "score_breakdown", "score_reasoning")})
    assert minimal.missing_tools == [] and minimal.alternative_approaches == []


def test_verdict_score_is_total_over_100_with_everything_in_details():
    score, details = verdict_type("alert_session_judge").score(JudgeOutputSchema.model_validate(VERDICT))
    assert score == pytest.approx(0.67)
    assert details["score_breakdown"] == VERDICT["score_breakdown"] and details["breakdown_total"] == 67
    assert details["missing_tools"] == VERDICT["missing_tools"]
    assert details["alternative_approaches"] == VERDICT["alternative_approaches"]
    assert details["score_reasoning"] == VERDICT["score_reasoning"] and details["total_score"] == 67


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [("list-processes-in-pod", "list-processes-in-pod"), ("List_Processes In-Pod", "list-processes-in-pod"), (" read__file ", "read-file")],
)
def test_tool_names_are_normalised(raw, normalised):
    assert normalize_tool_name(raw) == normalised


# --- the suite --------------------------------------------------------------------------------------------


def test_suite_defaults_and_env(monkeypatch):
    for var in ("SCORING_ENABLED", "SCORING_LLM_PROVIDER", "DEFAULT_LLM_PROVIDER", "SCORING_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    suite = load_suite(CONFIG, "alert_session")
    assert suite.options.enabled is True
    assert suite.criteria.kind == "alert_session" and suite.criteria.judge_component == "judge"
    assert suite.criteria.components["judge"].weight == 1.0
    assert suite.criteria.judge.provider == "anthropic"
    assert suite.criteria.judge.model == "claude-sonnet-5-5"  # empty SCORING_LLM_MODEL: the provider's default
    assert suite.criteria.judge.verdict_schema == JudgeOutputSchema.model_json_schema()
    default_hash = suite.criteria_hash

    monkeypatch.setenv("SCORING_ENABLED", "false")
    disabled = load_suite(CONFIG, "alert_session")
    assert disabled.options.enabled is False and disabled.criteria_hash == default_hash  # enabled is not criteria

    monkeypatch.setenv("SCORING_LLM_MODEL", "claude-sonnet-5-5")
    assert load_suite(CONFIG, "alert_session").criteria_hash == default_hash  # the resolved model is hashed
    monkeypatch.setenv("SCORING_LLM_MODEL", "claude-haiku-5-5")
    assert load_suite(CONFIG, "alert_session").criteria_hash != default_hash

    monkeypatch.delenv("SCORING_LLM_MODEL")
    monkeypatch.setenv("DEFAULT_LLM_PROVIDER", "google-default")
    with pytest.raises(CriteriaError, match="unknown judge provider 'google-default'"):
        load_suite(CONFIG, "alert_session")
    monkeypatch.setenv("SCORING_LLM_PROVIDER", "anthropic")  # SCORING_LLM_PROVIDER wins over DEFAULT_LLM_PROVIDER
    assert load_suite(CONFIG, "alert_session").criteria_hash == default_hash


def test_hash_changes_when_the_prompt_file_changes(tmp_path: Path):
    config = tmp_path / "config"
    shutil.copytree(CONFIG, config)
    before = load_suite(config, "alert_session").criteria_hash
    prompt = config / "prompts" / "alert_session_judge.md"
    prompt.write_text(prompt.read_text().replace("EXTREME CRITICAL RIGOR", "CRITICAL RIGOR"))
    assert load_suite(config, "alert_session").criteria_hash != before
