"""POST /v1/traces as the OTLP/HTTP specification says: both encodings, gzip, partial success, and an
OTLP error (a google.rpc.Status in the request's encoding) for everything it cannot take."""

from __future__ import annotations

import base64
import gzip
import json
import os

import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy import select

from assay.scoring.store.db import transaction
from assay.scoring.store.online_models import OnlineTrace, Span
from tests.online.support import chat_span, clear_online_tables, export_request

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def client(api_client):
    clear_online_tables()
    return api_client


def _stored() -> list[Span]:
    with transaction() as session:
        return list(session.scalars(select(Span).order_by(Span.span_id)))


def _status(response) -> status_pb2.Status:
    status = status_pb2.Status()
    if response.headers["content-type"].startswith("application/x-protobuf"):
        status.ParseFromString(response.content)
    else:
        body = response.json()
        status.code, status.message = body.get("code", 0), body.get("message", "")
    return status


def test_protobuf_export_is_stored_with_its_trace_index(client):
    trace = os.urandom(16)
    root, child = os.urandom(8), os.urandom(8)
    body = export_request([chat_span(trace, root), chat_span(trace, child, root, model="gpt-4o-mini")]).SerializeToString()
    response = client.post("/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(response.content)
    assert not parsed.HasField("partial_success")
    spans = {span.span_id: span for span in _stored()}
    assert set(spans) == {root.hex(), child.hex()}
    assert spans[child.hex()].parent_span_id == root.hex()
    assert spans[root.hex()].service_name == "support-bot"
    assert spans[root.hex()].attributes["gen_ai.request.model"] == "gpt-4o"
    with transaction() as session:
        index = session.get(OnlineTrace, trace.hex())
    assert index is not None and index.root_ended_at is not None and not index.decided


def test_json_export_reads_hex_ids_and_answers_in_json(client):
    trace, span = os.urandom(16).hex(), os.urandom(8).hex()
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "support-bot"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "manual"},
                        "spans": [
                            {
                                "traceId": trace,
                                "spanId": span,
                                "name": "chat gpt-4o",
                                "kind": 3,
                                "startTimeUnixNano": "1000000000",
                                "endTimeUnixNano": "2000000000",
                                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
                                "someFutureField": {"ignored": True},
                            }
                        ],
                    }
                ],
            }
        ]
    }
    response = client.post("/v1/traces", content=json.dumps(body), headers=JSON)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert "partialSuccess" not in response.json()
    (stored,) = _stored()
    assert (stored.trace_id, stored.span_id, stored.kind) == (trace, span, 3)
    assert stored.end_unix_nano == 2_000_000_000


def test_gzip_body_is_inflated(client):
    body = gzip.compress(export_request([chat_span(os.urandom(16), os.urandom(8))]).SerializeToString())
    response = client.post("/v1/traces", content=body, headers={**PROTOBUF, "Content-Encoding": "gzip"})
    assert response.status_code == 200
    assert len(_stored()) == 1


def test_gzip_bomb_is_refused_without_inflating_it(client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "otlp_max_decompressed_bytes", 1024 * 1024)
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros, ~64 KiB sent
    assert len(bomb) < 100 * 1024
    response = client.post("/v1/traces", content=bomb, headers={**PROTOBUF, "Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "decompresses to more than 1048576 bytes" in _status(response).message
    assert _stored() == []


@pytest.mark.parametrize(
    "headers, body, status, says",
    [
        (PROTOBUF, b"\xff\xff\xff\xff garbage", 400, "not an ExportTraceServiceRequest"),
        (JSON, b"{not json", 400, "not JSON"),
        (JSON, b"[1, 2]", 400, "a JSON object was expected"),
        (JSON, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', 400, "not a hex string"),
        ({"Content-Type": "text/plain"}, b"hello", 415, "not an OTLP encoding"),
        ({**PROTOBUF, "Content-Encoding": "br"}, b"x", 415, "Content-Encoding br"),
        ({**PROTOBUF, "Content-Encoding": "gzip"}, b"not gzip at all", 400, "not valid gzip"),
    ],
    ids=["protobuf garbage", "json garbage", "json not an object", "json id not hex", "wrong content type", "unknown encoding", "bad gzip"],
)
def test_what_cannot_be_read_gets_an_otlp_error(client, headers, body, status, says):
    response = client.post("/v1/traces", content=body, headers=headers)
    assert response.status_code == status
    expected_type = "application/x-protobuf" if headers["Content-Type"] == PROTOBUF["Content-Type"] else "application/json"
    assert response.headers["content-type"] == expected_type
    assert says in _status(response).message
    assert _stored() == []


def test_spans_missing_ids_or_with_oversized_attributes_are_a_partial_success(client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "otlp_max_attribute_bytes", 4096)
    good = chat_span(os.urandom(16), os.urandom(8))
    no_trace = chat_span(b"", os.urandom(8))
    zero_span = chat_span(os.urandom(16), b"\0" * 8)
    huge = chat_span(os.urandom(16), os.urandom(8), answer="x" * 10_000)
    response = client.post("/v1/traces", content=export_request([good, no_trace, zero_span, huge]).SerializeToString(), headers=PROTOBUF)
    assert response.status_code == 200
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(response.content)
    assert parsed.partial_success.rejected_spans == 3
    message = parsed.partial_success.error_message
    assert "trace_id must be 16 bytes" in message and "span_id must be 8 bytes" in message
    assert "gen_ai.output.messages" in message and "ASSAY_OTLP_MAX_ATTRIBUTE_BYTES" in message
    assert [span.span_id for span in _stored()] == [good.span_id.hex()]


def test_a_request_whose_every_span_is_refused_is_a_400(client):
    body = export_request([chat_span(b"", os.urandom(8))]).SerializeToString()
    response = client.post("/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 400
    assert "every span was refused" in _status(response).message


def test_an_empty_export_is_a_success(client):
    response = client.post("/v1/traces", content=b"{}", headers=JSON)
    assert response.status_code == 200
    assert response.json() == {}


def test_a_request_without_a_key_is_refused_in_its_encoding(client):
    body = export_request([chat_span(os.urandom(16), os.urandom(8))]).SerializeToString()
    response = client.post("/v1/traces", content=body, headers={**PROTOBUF, "Authorization": "Bearer wrong-key-" + "x" * 40})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/x-protobuf"
    assert "API key" in _status(response).message
    assert _stored() == []


def test_a_body_over_the_sent_size_cap_is_refused(client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "otlp_max_body_bytes", 1000)
    body = export_request([chat_span(os.urandom(16), os.urandom(8), answer="y" * 2000)]).SerializeToString()
    response = client.post("/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 413
    assert _stored() == []


def test_mangled_exports_get_an_otlp_answer_never_a_500(client):
    """Truncated, bit-flipped and spliced copies of a valid export, in both encodings: each is taken
    whole, taken in part, or refused with a 400 in the request's encoding."""
    import random

    from google.protobuf import json_format

    rng = random.Random(33)
    trace, root = os.urandom(16), os.urandom(8)
    request = export_request([chat_span(trace, root), chat_span(trace, os.urandom(8), root)])
    valid = {PROTOBUF["Content-Type"]: request.SerializeToString()}
    document = json_format.MessageToDict(request)
    for spans in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in spans:
                spans[key] = base64.b64decode(spans[key]).hex()
    valid[JSON["Content-Type"]] = json.dumps(document).encode()
    seen = set()
    for content_type, body in valid.items():
        for _ in range(25):
            mangled = bytearray(body)
            how = rng.choice(("truncate", "flip", "splice"))
            if how == "truncate":
                mangled = mangled[: rng.randrange(1, len(mangled))]
            elif how == "flip":
                for _ in range(rng.randint(1, 8)):
                    mangled[rng.randrange(len(mangled))] ^= 1 << rng.randrange(8)
            else:
                start = rng.randrange(len(mangled))
                mangled[start:start] = os.urandom(rng.randint(1, 64))
            response = client.post("/v1/traces", content=bytes(mangled), headers={"Content-Type": content_type})
            assert response.status_code in (200, 400), (how, response.status_code, response.text[:300])
            assert response.headers["content-type"] == content_type
            if response.status_code == 400:
                assert _status(response).message
            elif content_type == PROTOBUF["Content-Type"]:
                ExportTraceServiceResponse.FromString(response.content)
            else:
                assert isinstance(response.json(), dict)
            seen.add(response.status_code)
    assert seen == {200, 400}  # both outcomes were exercised
