"""OTLP/HTTP trace export requests, read and answered as the OpenTelemetry specification says.

A request is an ``ExportTraceServiceRequest`` in protobuf (``application/x-protobuf``) or in OTLP/JSON
(``application/json``: the protobuf JSON mapping, except that trace and span ids are hex strings, not
base64, and unknown fields are ignored), optionally gzip-compressed (``Content-Encoding: gzip``). The
answer is in the request's encoding: an ``ExportTraceServiceResponse`` (200), whose ``partialSuccess``
counts the spans refused (``rejectedSpans``) and says why (``errorMessage``); or, for a request that
cannot be taken at all, a ``google.rpc.Status`` with the HTTP status (400 malformed, 413 too large once
decompressed, 415 an encoding this receiver does not speak).

Each span is checked on its own: a span without a valid trace id (16 bytes, not all zero) or span id
(8 bytes, not all zero), or with an attribute whose value is larger than the configured cap, is
refused and counted; the others are kept. A request all of whose spans are refused is a 400.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = (PROTOBUF, JSON)
# How many refused spans the error message names (the count covers them all).
_NAMED_REASONS = 5


class OtlpError(Exception):
    """A request this receiver cannot take: answered with ``status`` and a ``google.rpc.Status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def rpc_code(self) -> int:
        return {
            401: code_pb2.UNAUTHENTICATED, 413: code_pb2.RESOURCE_EXHAUSTED, 415: code_pb2.UNIMPLEMENTED, 503: code_pb2.UNAVAILABLE
        }.get(self.status, code_pb2.INVALID_ARGUMENT)


@dataclass
class DecodedSpans:
    """The spans kept, as rows of ``spans`` (without ``id`` and ``received_at``), and what was refused."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def refuse(self, reason: str) -> None:
        self.rejected += 1
        if len(self.reasons) < _NAMED_REASONS:
            self.reasons.append(reason)

    @property
    def error_message(self) -> str:
        more = self.rejected - len(self.reasons)
        return "; ".join(self.reasons) + (f"; and {more} more" if more > 0 else "")


def media_type(content_type: str | None) -> str:
    """The request's encoding, or an OtlpError (415) naming the ones accepted."""
    declared = (content_type or "").split(";", 1)[0].strip().lower()
    if declared not in ENCODINGS:
        raise OtlpError(415, f"Content-Type {declared or '(none)'} is not an OTLP encoding; send {PROTOBUF} or {JSON}")
    return declared


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body as sent before compression, refused (413) past ``limit`` bytes without inflating it further."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        if len(body) > limit:
            raise OtlpError(413, f"the request is larger than {limit} bytes (ASSAY_OTLP_MAX_DECOMPRESSED_BYTES)")
        return body
    if encoding != "gzip":
        raise OtlpError(415, f"Content-Encoding {encoding} is not supported; send gzip or no encoding")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"the body is not valid gzip: {exc}") from None
    if len(data) > limit:
        raise OtlpError(
            413, f"the request decompresses to more than {limit} bytes (ASSAY_OTLP_MAX_DECOMPRESSED_BYTES)"
        )
    if not inflater.eof:
        raise OtlpError(400, "the body is not valid gzip: it ends before the compressed stream does")
    return data


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP/JSON writes ids as hex; the protobuf JSON mapping reads bytes as base64."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise OtlpError(400, f"{key} {value[:40]!r} is not a hex string (OTLP/JSON writes ids as hex)") from None
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for value in node:
            _hex_ids_to_base64(value)


def parse_request(data: bytes, encoding: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if encoding == PROTOBUF:
        try:
            request.ParseFromString(data)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise OtlpError(400, f"the body is not an ExportTraceServiceRequest in protobuf: {exc}") from None
        return request
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OtlpError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise OtlpError(400, "the body is not an ExportTraceServiceRequest: a JSON object was expected")
    _hex_ids_to_base64(document)
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        raise OtlpError(400, f"the body is not an ExportTraceServiceRequest in OTLP/JSON: {exc}") from None
    return request


def any_value(value: AnyValue) -> Any:
    """An attribute's value as JSON: bytes as hex, arrays as lists, key-value lists as objects."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _attributes(pairs: Any, cap: int, where: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in pairs:
        size = kv.value.ByteSize()
        if size > cap:
            raise ValueError(f"{where}: attribute {kv.key[:100]!r} is {size} bytes, over ASSAY_OTLP_MAX_ATTRIBUTE_BYTES ({cap})")
        found[kv.key] = any_value(kv.value)
    return found


def _valid_id(raw: bytes, size: int) -> bool:
    return len(raw) == size and any(raw)


def decode_spans(request: ExportTraceServiceRequest, attribute_bytes: int) -> DecodedSpans:
    """The request's spans as rows, each span checked on its own (see the module's docstring)."""
    decoded = DecodedSpans()
    for resource_spans in request.resource_spans:
        try:
            resource = _attributes(resource_spans.resource.attributes, attribute_bytes, "resource")
        except ValueError as exc:
            for scope_spans in resource_spans.scope_spans:
                for _ in scope_spans.spans:
                    decoded.refuse(str(exc))
            continue
        service = resource.get("service.name")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                where = f"span {span.span_id.hex() or '(no id)'} of trace {span.trace_id.hex() or '(no id)'}"
                if not _valid_id(span.trace_id, 16):
                    decoded.refuse(f"{where}: trace_id must be 16 bytes, not all zero")
                    continue
                if not _valid_id(span.span_id, 8):
                    decoded.refuse(f"{where}: span_id must be 8 bytes, not all zero")
                    continue
                if span.parent_span_id and len(span.parent_span_id) != 8:
                    decoded.refuse(f"{where}: parent_span_id must be 8 bytes or empty")
                    continue
                if not span.name:
                    decoded.refuse(f"{where}: the span has no name")
                    continue
                try:
                    attributes = _attributes(span.attributes, attribute_bytes, where)
                    events = [
                        {
                            "name": event.name,
                            "time_unix_nano": event.time_unix_nano,
                            "attributes": _attributes(event.attributes, attribute_bytes, f"{where}, event {event.name[:100]!r}"),
                        }
                        for event in span.events
                    ]
                except ValueError as exc:
                    decoded.refuse(str(exc))
                    continue
                decoded.rows.append(
                    dict(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        service_name=str(service)[:255] if service is not None else None,
                        kind=int(span.kind),
                        start_unix_nano=_signed(span.start_time_unix_nano),
                        end_unix_nano=_signed(span.end_time_unix_nano),
                        status_code=int(span.status.code),
                        status_message=span.status.message or None,
                        attributes=attributes,
                        resource=resource,
                        events=events or None,
                    )
                )
    return decoded


def _signed(nanos: int) -> int:
    # fixed64 on the wire, BIGINT in the store: a time past 2262 (or garbage) is clamped, never an overflow.
    return min(nanos, 2**63 - 1)


def response_body(encoding: str, decoded: DecodedSpans) -> bytes:
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=decoded.rejected, error_message=decoded.error_message)
        )
    return _encode(response, encoding)


def status_body(encoding: str, error: OtlpError) -> bytes:
    return _encode(status_pb2.Status(code=error.rpc_code, message=error.message), encoding)


def _encode(message: Any, encoding: str) -> bytes:
    if encoding == PROTOBUF:
        return message.SerializeToString()
    # OTLP/JSON: lowerCamelCase keys, and int64 counts written as JSON numbers would do too, but the
    # protobuf mapping's strings are what every OTLP client reads.
    return json.dumps(json_format.MessageToDict(message)).encode()
