"""The ``alert_session`` kind (the alert-session scoring design, TARSy EP-0028): a finished SRE-agent investigation judged
by an LLM on its methodology.

An item is one alert-analysis session: its alert, the whole conversation (messages and MCP tool
calls with their results), the final analysis and the tools the agent had. The judge sees it
through the EP's placeholders, ``{{SESSION_CONVERSATION}}`` and ``{{ALERT_DATA}}``
(``{{OUTPUT_SCHEMA}}`` is the verdict schema, filled by the judge itself), and answers with the
EP's ``JudgeOutputSchema``. The score is ``total_score / 100``.

Beside the verdict, the judge component's details carry deterministic *session facts* (tool calls,
failed tool calls, distinct tools used vs available, iterations, duration) and a record of how the
session was fitted into the judge model's context window:

**Long sessions** (:func:`prepare_judge`). The session text is measured (``estimate_tokens``, about
four characters a token) against a budget: ``(context_window - max_tokens) * SAFETY_RATIO`` minus
the prompt template and the output schema. Over it, tool *outputs* are replaced by a one-line
marker, **oldest first**, until the session fits; the tool calls themselves, their arguments and
errors, every message and the final analysis are always kept. What was cut is recorded in the
details (``judge_input``). A session that does not fit even with every tool output cut fails the
judge component with a message saying so (:class:`SessionTooLong`). So does a session that is not
completed (a batch upload may carry one): only a completed investigation is judged.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    Field,
)

from assay.scoring.errors import AssayError
from assay.scoring.judge.governor import estimate_tokens
from assay.scoring.judge.prompt import OUTPUT_SCHEMA, PLACEHOLDER, output_schema_text
from assay.scoring.judge.verdicts import register_verdict
from assay.scoring.kinds import Kind
from assay.scoring.sessions.items import (
    COMPLETED,
    KIND_NAME,
    AlertSessionItem,
    ChatMessage,
    StrictModel,
    ToolCall,
    aware,
)

FACTS_VERSION = 1

# The token estimate (characters / 4) undercounts JSON- and log-heavy text; only this share of the
# room the model leaves for input is planned for.
SAFETY_RATIO = 0.85
TRUNCATION_RULE = "oldest tool outputs first"

# --- the verdict (EP-0028 "Scoring Output Schema") -----------------------------------------------------


class MissingTool(StrictModel):
    """Missing tool that should have been used in the investigation."""

    tool_name: str = Field(..., description="Name of the missing MCP tool")
    rationale: str = Field(..., description="Explanation of why this tool was needed")


class AlternativeApproach(StrictModel):
    """Alternative investigation approach that could have been more efficient/rigorous."""

    name: str = Field(..., description="Brief descriptive title of the approach")
    description: str = Field(..., description="1-2 sentences explaining the strategy")
    steps: list[str] = Field(..., description="Ordered list of specific actions")


class ScoreBreakdown(StrictModel):
    """The four dimensions of the judge prompt's scoring framework, 25 points each.

    The EP declares ``score_breakdown`` a free-form ``Dict[str, Any]``; strict structured output
    admits no free-form object, so the dimensions are named here. It is stored as a plain JSON dict.
    """

    logical_flow: int = Field(..., ge=0, le=25, description="1. LOGICAL FLOW (0-25 points)")
    consistency: int = Field(..., ge=0, le=25, description="2. CONSISTENCY (0-25 points)")
    tool_relevance: int = Field(..., ge=0, le=25, description="3. TOOL RELEVANCE (0-25 points)")
    synthesis_quality: int = Field(..., ge=0, le=25, description="4. SYNTHESIS QUALITY (0-25 points)")


class JudgeOutputSchema(StrictModel):
    """Output schema for the judge LLM (EP-0028), defined in code for parsing reliability and injected
    into the judge prompt as its output format."""

    total_score: int = Field(..., ge=0, le=100, description="Overall score 0-100")
    score_breakdown: ScoreBreakdown = Field(
        ..., description="Dimension scores: logical_flow, consistency, tool_relevance, synthesis_quality (0-25 each)"
    )
    score_reasoning: str = Field(..., description="Detailed explanation (200+ words recommended)")
    missing_tools: list[MissingTool] = Field(default_factory=list, description="Tools that should have been used")
    alternative_approaches: list[AlternativeApproach] = Field(
        default_factory=list, description="Alternative investigation approaches"
    )


def _verdict_score(verdict: JudgeOutputSchema) -> tuple[float, dict[str, Any]]:
    breakdown = verdict.score_breakdown.model_dump()
    return verdict.total_score / 100, {
        "total_score": verdict.total_score,
        "score_breakdown": breakdown,
        # The total is the judge's own; the dimensions are kept as given, with their sum for a check.
        "breakdown_total": sum(breakdown.values()),
        "score_reasoning": verdict.score_reasoning,
        "missing_tools": [t.model_dump() for t in verdict.missing_tools],
        "alternative_approaches": [a.model_dump() for a in verdict.alternative_approaches],
    }


# --- session facts -------------------------------------------------------------------------------------


def session_facts(item: AlertSessionItem) -> dict[str, Any]:
    """Deterministic facts read off the conversation, stored beside the judge's verdict."""
    calls = [e for e in item.conversation if isinstance(e, ToolCall)]
    used = list(dict.fromkeys(c.tool_name for c in calls))
    available = list(dict.fromkeys(t.name for t in item.available_tools))
    duration = None
    if item.started_at and item.ended_at:
        duration = round((aware(item.ended_at) - aware(item.started_at)).total_seconds(), 3)
    return {
        "facts_version": FACTS_VERSION,
        "messages": sum(1 for e in item.conversation if isinstance(e, ChatMessage)),
        # One LLM turn per assistant message: the agent's reasoning iterations.
        "iterations": sum(1 for e in item.conversation if isinstance(e, ChatMessage) and e.role == "assistant"),
        "tool_calls": len(calls),
        "failed_tool_calls": sum(1 for c in calls if c.failed),
        "distinct_tools_used": len(used),
        "available_tools": len(available),
        "available_tools_used": sum(1 for name in available if name in set(used)),
        "tools_used": sorted(used),
        "unused_available_tools": sorted(set(available) - set(used)),
        # Calls to tools the session did not list as available (only when it lists any).
        "unlisted_tools_used": sorted(set(used) - set(available)) if available else [],
        "duration_seconds": duration,
    }


# --- what the judge sees --------------------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _when(moment: datetime | None) -> str:
    return moment.isoformat() if moment is not None else "unknown"


def _header(item: AlertSessionItem) -> str:
    lines = [f"Session {item.session_id} (status: {item.status})"]
    if item.alert_type:
        lines.append(f"Alert type: {item.alert_type}")
    lines.append(f"Started: {_when(item.started_at)}; ended: {_when(item.ended_at)}")
    lines.append("")
    if item.available_tools:
        lines.append(f"Available tools ({len(item.available_tools)}):")
        for tool in item.available_tools:
            name = f"{tool.server}.{tool.name}" if tool.server else tool.name
            lines.append(f"- {name}" + (f": {tool.description}" if tool.description else ""))
    else:
        lines.append("Available tools: not listed")
    lines.append("")
    lines.append(f"Conversation ({len(item.conversation)} entries, oldest first):")
    return "\n".join(lines) + "\n"


def _elided(result: Any) -> str:
    return f"[tool output omitted to fit the judge's context window: {len(_text(result))} characters]"


def _entry_block(position: int, entry: ChatMessage | ToolCall, *, elide_output: bool = False) -> str:
    stamp = f" at {entry.timestamp.isoformat()}" if entry.timestamp else ""
    if isinstance(entry, ChatMessage):
        return f"\n### [{position}] {entry.role.upper()}{stamp}\n{entry.content}\n"
    outcome = "FAILED" if entry.failed else "ok"
    took = f", {entry.duration_ms:g} ms" if entry.duration_ms is not None else ""
    parts = [f"\n### [{position}] TOOL CALL {entry.qualified_name} ({outcome}{took}){stamp}"]
    parts.append(f"Arguments: {json.dumps(entry.arguments, ensure_ascii=False, default=str)}")
    if entry.error:
        parts.append(f"Error: {entry.error}")
    if entry.result is not None:
        parts.append("Result:")
        parts.append(_elided(entry.result) if elide_output else _text(entry.result))
    return "\n".join(parts) + "\n"


def _final_block(item: AlertSessionItem) -> str:
    return f"\n### Final analysis\n{item.final_analysis if item.final_analysis else '(none recorded)'}\n"


def render_alert(item: AlertSessionItem) -> str:
    """``{{ALERT_DATA}}``: the alert type and the alert's data as indented JSON."""
    head = f"Alert type: {item.alert_type}\n" if item.alert_type else ""
    return head + _json(item.alert_data)


def render_conversation(item: AlertSessionItem, elide: frozenset[int] = frozenset()) -> str:
    """``{{SESSION_CONVERSATION}}``: the session header, every entry in order and the final analysis.
    ``elide`` holds the 0-based positions of tool calls whose output is replaced by a marker."""
    blocks = [_header(item)]
    blocks += [_entry_block(i + 1, e, elide_output=i in elide) for i, e in enumerate(item.conversation)]
    blocks.append(_final_block(item))
    return "".join(blocks)


def _judge_inputs(item: AlertSessionItem) -> dict[str, str]:
    return {"SESSION_CONVERSATION": render_conversation(item), "ALERT_DATA": render_alert(item)}


class SessionNotCompleted(AssayError):
    """Only a completed session is judged (a batch upload may hold one still running)."""

    status_code = 400
    code = "session_not_completed"


class SessionTooLong(AssayError):
    """The session does not fit the judge model's context window even with every tool output cut."""

    status_code = 422
    code = "session_too_long"


def input_budget(template: str, verdict_model: type[BaseModel], *, max_tokens: int, context_window: int) -> int:
    """Estimated tokens left for the per-item placeholder values of ``template``."""
    fixed = PLACEHOLDER.sub(lambda m: output_schema_text(verdict_model) if m.group(1) == OUTPUT_SCHEMA else "", template)
    return int((context_window - max_tokens) * SAFETY_RATIO) - estimate_tokens(fixed)


def prepare_judge(
    item: AlertSessionItem,
    *,
    template: str,
    verdict_model: type[BaseModel],
    model: str,
    max_tokens: int,
    context_window: int,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The placeholder values, fitted to the judge model's context window, and the details to store
    beside the verdict (session facts, what was measured and what was cut). Raises
    :class:`SessionTooLong` when the session cannot fit, :class:`SessionNotCompleted` when it is not
    completed (the judge is not called)."""
    if not item.completed:
        raise SessionNotCompleted(
            f"session {item.session_id} is {item.status!r}, not completed: only a completed session is judged",
            session_facts=session_facts(item),
        )
    budget = input_budget(template, verdict_model, max_tokens=max_tokens, context_window=context_window)
    alert = render_alert(item)
    fixed = estimate_tokens(alert) + estimate_tokens(_header(item)) + estimate_tokens(_final_block(item))
    blocks = [estimate_tokens(_entry_block(i + 1, e)) for i, e in enumerate(item.conversation)]
    before = fixed + sum(blocks)
    record: dict[str, Any] = {
        "estimated_tokens": before,
        "budget_tokens": budget,
        "context_window": context_window,
        "max_tokens": max_tokens,
        "model": model,
        "truncated": False,
    }
    facts = session_facts(item)
    elide: set[int] = set()
    total = before
    if total > budget:
        # Oldest first: conversation order is chronological.
        for i, entry in enumerate(item.conversation):
            if total <= budget:
                break
            if isinstance(entry, ToolCall) and entry.result is not None:
                smaller = estimate_tokens(_entry_block(i + 1, entry, elide_output=True))
                if smaller < blocks[i]:
                    total -= blocks[i] - smaller
                    blocks[i] = smaller
                    elide.add(i)
        outputs = sum(1 for e in item.conversation if isinstance(e, ToolCall) and e.result is not None)
        record.update(
            truncated=True,
            rule=TRUNCATION_RULE,
            estimated_tokens=total,
            estimated_tokens_before=before,
            tool_outputs_elided=len(elide),
            tool_outputs_total=outputs,
            elided_entries=sorted(i + 1 for i in elide),
        )
        if total > budget:
            raise SessionTooLong(
                f"session {item.session_id} is too long for judge model {model}: about {before} tokens of "
                f"session data, {total} with all {outputs} tool output(s) cut ({TRUNCATION_RULE}), over the "
                f"{budget} tokens available in its {context_window}-token context window",
                judge_input=record,
                session_facts=facts,
            )
    conversation = render_conversation(item, frozenset(elide))
    return {"SESSION_CONVERSATION": conversation, "ALERT_DATA": alert}, {
        "session_facts": facts,
        "judge_input": record,
    }


# --- after the score -------------------------------------------------------------------------------------


def on_finalized(session: Any, score: Any, components: list[Any], criteria: Any) -> None:
    """Write the verdict's missing tools and alternative approaches (with their steps) as rows, in the
    transaction that finalizes the score. Only a completed score has them."""
    from assay.scoring.sessions.store import write_feedback

    if score.status != "completed" or criteria.judge_component is None:
        return
    judge = next((c for c in components if c.component == criteria.judge_component), None)
    if judge is None or judge.status != "ok":
        return
    write_feedback(session, score.id, judge.details or {})


def report_row(score: Any) -> dict[str, Any]:
    """Export columns: the EP's fields for one stored score."""
    from assay.scoring.sessions.views import report_columns

    return report_columns(score)


def _rescore_filter() -> Any:
    """Re-scoring takes the current (newest) stored version of each completed session only."""
    from sqlalchemy import and_, exists, or_
    from sqlalchemy.orm import aliased

    from assay.scoring.store.models import Item

    newer = aliased(Item)
    return and_(
        Item.payload["status"].as_string() == COMPLETED,
        ~exists().where(
            newer.kind == Item.kind,
            newer.external_id == Item.external_id,
            or_(newer.created_at > Item.created_at, and_(newer.created_at == Item.created_at, newer.id > Item.id)),
        ),
    )


KIND = Kind(
    name=KIND_NAME,
    item_model=AlertSessionItem,
    judge_inputs=_judge_inputs,
    report_row=report_row,
    prepare_judge=prepare_judge,
    on_finalized=on_finalized,
    external_id=lambda item: item.session_id,
    rescore_filter=_rescore_filter,
)

register_verdict("alert_session_judge", JudgeOutputSchema, _verdict_score)
