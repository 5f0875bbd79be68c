"""Prompt rendering: placeholders, the static prefix for caching, and clear errors."""

from __future__ import annotations

import json
import logging

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.prompt import PromptError, output_schema_text, render_prompt
from assay.scoring.kinds.kql import KqlGrade
from assay.settings import REPO_ROOT

MODEL = "claude-haiku-5-5"
KQL_TEMPLATE = (REPO_ROOT / "config" / "prompts" / "kql_grading.md").read_text()
KQL_INPUTS = {"PROMPT": "failed logins per hour", "GENERATED_KQL": "SigninLogs | take 1", "EXPECTED_KQL": "SigninLogs"}


def render(template: str, inputs: dict[str, str], min_cacheable_tokens: int = 0, model: str = MODEL):
    return render_prompt(template, inputs, KqlGrade, model=model, min_cacheable_tokens=min_cacheable_tokens)


def test_kql_prompt_splits_before_the_first_item_placeholder():
    prompt = render(KQL_TEMPLATE, KQL_INPUTS)
    static, _, _ = KQL_TEMPLATE.partition("{{PROMPT}}")

    assert prompt.system == static
    assert prompt.user.startswith("failed logins per hour\n")
    assert "SigninLogs | take 1" in prompt.user and "{{" not in prompt.user
    assert prompt.system_blocks() == [{"type": "text", "text": static, "cache_control": {"type": "ephemeral"}}]


def test_output_schema_is_static_and_filled_with_the_verdict_schema():
    template = "Rubric.\nAnswer with JSON following:\n{{OUTPUT_SCHEMA}}\nQuery:\n{{GENERATED_KQL}}\n" "Again: {{OUTPUT_SCHEMA}}"
    prompt = render(template, KQL_INPUTS)
    schema = output_schema_text(KqlGrade)

    assert prompt.system == f"Rubric.\nAnswer with JSON following:\n{schema}\nQuery:\n"
    assert prompt.user == f"SigninLogs | take 1\nAgain: {schema}"
    assert json.loads(schema) == KqlGrade.model_json_schema()


def test_unknown_placeholder_is_a_clear_error():
    with pytest.raises(PromptError) as caught:
        render("Judge {{SESSION_CONVERSATION}} against {{ALERT_DATA}}", {"SESSION_CONVERSATION": "..."})
    assert isinstance(caught.value, CriteriaError)
    assert "{{ALERT_DATA}}" in caught.value.message
    assert "{{SESSION_CONVERSATION}}" in caught.value.message.split("provides")[1]


def test_a_template_without_item_data_is_refused():
    with pytest.raises(PromptError, match="no per-item placeholder"):
        render("Grade it.\n{{OUTPUT_SCHEMA}}", KQL_INPUTS)


def test_item_data_is_never_expanded_as_a_placeholder():
    inputs = {**KQL_INPUTS, "GENERATED_KQL": "print '{{EXPECTED_KQL}}'"}
    prompt = render("Rubric\n{{GENERATED_KQL}} / {{EXPECTED_KQL}}", inputs)
    assert prompt.user == "print '{{EXPECTED_KQL}}' / SigninLogs"


def test_a_template_starting_with_item_data_has_no_system_prompt():
    prompt = render("  \n{{PROMPT}} is the request.", KQL_INPUTS)
    assert prompt.system == "" and prompt.system_blocks() == []
    assert prompt.user == "failed logins per hour is the request."


def test_short_prefix_warns_once_per_model_and_prefix(caplog):
    caplog.set_level(logging.WARNING, logger="assay.scoring.judge.prompt")
    template = "A short rubric for the warning test.\n{{PROMPT}}"
    for _ in range(3):
        render(template, KQL_INPUTS, min_cacheable_tokens=2048)
    render(template, KQL_INPUTS, min_cacheable_tokens=1024, model="claude-sonnet-5-5")
    render("A long enough rubric. " * 400 + "{{PROMPT}}", KQL_INPUTS, min_cacheable_tokens=1024)

    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert MODEL in warnings[0] and "2048" in warnings[0]
    assert "claude-sonnet-5-5" in warnings[1]
