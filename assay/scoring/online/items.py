"""What a suite's ``fields`` mapping reads when an online rule builds an item from spans.

A span becomes a JSON object (:func:`span_source`)::

    {"trace_id": ..., "span_id": ..., "parent_span_id": ..., "name": ..., "service": ...,
     "kind": 3, "status": {"code": 0, "message": null}, "start_unix_nano": ..., "end_unix_nano": ...,
     "duration_ms": 812.4,
     "attributes": {"gen_ai": {"request": {"model": "gpt-4o"}, "operation": {"name": "chat"}, ...}},
     "resource": {"service": {"name": "checkout-assistant"}},
     "events": [{"name": "gen_ai.choice", "attributes": {...}}],
     "input_text": "the user's messages' text", "output_text": "the model's answer's text"}

Attribute keys are split at their dots into nested objects, so a mapping path names them as written
(``attributes.gen_ai.request.model``; a key that is both a value and a prefix of others keeps the
value). The GenAI semantic conventions' structured attributes (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``), exported as JSON text, are parsed, so
``attributes.gen_ai.output.messages[0].parts[0].content`` reaches into them. ``input_text`` and
``output_text`` are the text parts of the input's user messages and of the output messages, or, for
instrumentations that record messages as span events, the ``content`` of ``gen_ai.user.message``
events and of ``gen_ai.choice`` events (or their ``message.content``).

A whole trace (:func:`trace_source`) is its root span's object plus ``spans`` (every span's object,
by start time) and ``matched`` (those the rule matched); its ``input_text`` is the first matched
span's and its ``output_text`` the last one's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from assay.scoring.store.online_models import Span

STRUCTURED_ATTRIBUTES = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions")


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` as ``{"a": {"b": 1, "c": 2}}``; shorter keys first, so a value that
    is also a prefix keeps its value and the longer keys under it are left out."""
    tree: dict[str, Any] = {}
    for key in sorted(flat, key=lambda k: (k.count("."), k)):
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node.setdefault(leaf, flat[key])
    return tree


def _parsed(key: str, value: Any) -> Any:
    if key in STRUCTURED_ATTRIBUTES and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _message_text(messages: Any, roles: tuple[str, ...] | None) -> str | None:
    if not isinstance(messages, list):
        return None
    texts = []
    for message in messages:
        if not isinstance(message, dict) or (roles is not None and message.get("role") not in roles):
            continue
        for part in message.get("parts") or []:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("content"), str):
                texts.append(part["content"])
        if isinstance(message.get("content"), str):  # the older flat form {"role", "content"}
            texts.append(message["content"])
    return "\n".join(texts) if texts else None


def _event_text(events: Sequence[dict[str, Any]], name: str) -> str | None:
    texts = []
    for event in events:
        if event.get("name") != name:
            continue
        attributes = event.get("attributes") or {}
        content = attributes.get("content")
        if content is None and isinstance(attributes.get("message"), dict):
            content = attributes["message"].get("content")
        if isinstance(content, str):
            texts.append(content)
    return "\n".join(texts) if texts else None


def span_source(span: Span) -> dict[str, Any]:
    flat = {key: _parsed(key, value) for key, value in (span.attributes or {}).items()}
    events = list(span.events or [])
    source: dict[str, Any] = {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "name": span.name,
        "service": span.service_name,
        "kind": span.kind,
        "status": {"code": span.status_code, "message": span.status_message},
        "start_unix_nano": span.start_unix_nano,
        "end_unix_nano": span.end_unix_nano,
        "duration_ms": round((span.end_unix_nano - span.start_unix_nano) / 1e6, 3),
        "attributes": nested(flat),
        "resource": nested(span.resource or {}),
        "events": [{**event, "attributes": nested(event.get("attributes") or {})} for event in events],
    }
    input_text = _message_text(flat.get("gen_ai.input.messages"), ("user",)) or _event_text(events, "gen_ai.user.message")
    output_text = _message_text(flat.get("gen_ai.output.messages"), None) or _event_text(events, "gen_ai.choice")
    if input_text is not None:
        source["input_text"] = input_text
    if output_text is not None:
        source["output_text"] = output_text
    return source


def trace_source(spans: Sequence[Span], matched: Sequence[Span]) -> dict[str, Any]:
    root = next((span for span in spans if span.parent_span_id is None), spans[0])
    matched_sources = [span_source(span) for span in matched]
    source = span_source(root)
    source["spans"] = [span_source(span) for span in spans]
    source["matched"] = matched_sources
    for key, pick in (("input_text", matched_sources), ("output_text", list(reversed(matched_sources)))):
        found = next((s[key] for s in pick if key in s), None)
        if found is not None:
            source[key] = found
        else:
            source.pop(key, None)
    return source
