"""An ``alert_session`` item (the TARSy alert-session scoring design, EP-0028): one finished SRE-agent
investigation, its alert, its conversation (messages and MCP tool calls with their results), the
final analysis and the tools the agent had. The kind (:mod:`assay.scoring.kinds.alert_session`) and
the session store both read it; it imports neither."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

KIND_NAME = "alert_session"
COMPLETED = "completed"

_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessage(StrictModel):
    """A message of the conversation: the agent's instructions, the user turn, an LLM answer."""

    type: Literal["message"] = "message"
    role: Literal["system", "user", "assistant"]
    content: str
    timestamp: datetime | None = None


class ToolCall(StrictModel):
    """One MCP tool call with what it returned. ``error`` (or ``success: false``) marks a failed call."""

    type: Literal["tool_call"] = "tool_call"
    tool_name: str = Field(..., min_length=1, max_length=255)
    server: str | None = Field(None, max_length=255, description="The MCP server the tool belongs to.")
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any = Field(None, description="What the tool returned (text or JSON).")
    error: str | None = Field(None, description="Set when the call failed.")
    success: bool | None = Field(None, description="False when the call failed; default: failed iff error is set.")
    timestamp: datetime | None = None
    duration_ms: float | None = Field(None, ge=0)

    @property
    def failed(self) -> bool:
        return self.success is False or (self.success is None and bool(self.error))

    @property
    def qualified_name(self) -> str:
        return f"{self.server}.{self.tool_name}" if self.server else self.tool_name


def _entry_tag(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type")
        if kind in ("message", "tool_call"):
            return kind
        return "tool_call" if "tool_name" in value else "message"
    return getattr(value, "type", "message")


ConversationEntry = Annotated[
    Annotated[ChatMessage, Tag("message")] | Annotated[ToolCall, Tag("tool_call")],
    Discriminator(_entry_tag),
]


class AvailableTool(StrictModel):
    name: str = Field(..., min_length=1, max_length=255)
    server: str | None = Field(None, max_length=255)
    description: str | None = None


class AlertSessionItem(StrictModel):
    """One alert-analysis session as TARSy's history service holds it (the alert-session scoring design)."""

    session_id: str = Field(..., min_length=1, max_length=255, pattern=_ID_PATTERN, description="TARSy's session id.")
    status: str = Field(
        ..., min_length=1, max_length=40, description="Session status; only a 'completed' session can be scored."
    )
    alert_type: str | None = Field(None, max_length=255)
    alert_data: dict[str, Any] = Field(..., description="The original alert.")
    conversation: list[ConversationEntry] = Field(
        default_factory=list, description="Messages and tool calls, oldest first."
    )
    final_analysis: str | None = None
    available_tools: list[AvailableTool] = Field(
        default_factory=list, description="The MCP tools the agent could use (names, or {name, server, description})."
    )
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @field_validator("status")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()

    @field_validator("available_tools", mode="before")
    @classmethod
    def _names_are_tools(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _times_in_order(self) -> AlertSessionItem:
        if self.started_at and self.ended_at and aware(self.ended_at) < aware(self.started_at):
            raise ValueError("ended_at is before started_at")
        return self

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def normalize_tool_name(name: str) -> str:
    """Tool names as analytics group them: case, ``-``, ``_`` and spaces do not matter."""
    return re.sub(r"[\s_\-]+", "-", name.strip().lower()).strip("-")
