"""What the online tests share: a suite with online rules, registered in the test store, and OTLP
requests built with OpenTelemetry's own classes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

SUITE = "online_chat"
SUITE_YAML = """
name: online_chat
kind: generic
threshold: 0.5
fields:
  input: input_text
  output: output_text
  metadata.model: attributes.gen_ai.request.model
components:
  mentions_refund:
    weight: 1.0
    metric: contains
    version: 1
    args: {value: refund, case_sensitive: false}
online:
  rules:
    - name: chat
      match:
        service: support-bot
        attributes: {gen_ai.operation.name: chat}
      per: span
      quiet_seconds: QUIET
      sample_rate: RATE
      slice_by: gen_ai.request.model
"""


def register_online_suite(quiet: float = 0.0, rate: float = 1.0, extra: str = "", value: str = "refund") -> None:
    """The suite, registered as an API suite would be (the test store's file suites stay as they are);
    ``value``: the word its metric looks for (another one is other criteria)."""
    from assay.scoring.store.db import transaction
    from assay.scoring.suites.criteria import register_suite
    from assay.scoring.suites.loader import parse_suite
    from assay.settings import get_settings

    text = SUITE_YAML.replace("QUIET", str(quiet)).replace("RATE", str(rate)).replace("value: refund", f"value: {value}") + extra
    suite = parse_suite(text, config_dir=get_settings().config_dir, env=os.environ, origin="api")
    with transaction() as session:
        register_suite(session, suite, origin="api")


def clear_online_tables() -> None:
    from sqlalchemy import text

    from assay.scoring.store.db import transaction

    with transaction() as session:
        session.execute(text("TRUNCATE spans, online_traces, online_decisions, online_scores"))


def _value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    return AnyValue(string_value=str(value))


def attributes(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=_value(value)) for key, value in values.items()]


def chat_span(
    trace_id: bytes, span_id: bytes, parent: bytes = b"", *, question: str = "where is my refund?", answer: str = "Your refund is on its way.",
    model: str = "gpt-4o", start_ns: int = 1_000_000_000, end_ns: int = 2_000_000_000,
) -> ProtoSpan:
    import json

    return ProtoSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=f"chat {model}",
        kind=ProtoSpan.SPAN_KIND_CLIENT,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        attributes=attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": model,
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]
                ),
            }
        ),
    )


def export_request(spans: Sequence[ProtoSpan], service: str = "support-bot") -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource={"attributes": attributes({"service.name": service})},
                scope_spans=[ScopeSpans(spans=list(spans))],
            )
        ]
    )
