"""``POST /v1/traces``: the OTLP/HTTP trace receiver (online scoring, docs/online.md).

The path OTLP exporters use by default: an application points its exporter's endpoint at the API and
puts its key in the exporter's headers (``Authorization: Bearer <key>``). The spans are stored in the
request's transaction and nothing else happens in it: when the response says they were taken, they
are in Postgres, whatever the workers, Redis or the judge are doing. Beat's sampler turns completed
traces into scores later. Every answer, errors included, is in the request's encoding (protobuf or
OTLP/JSON), as the OTLP specification says (``assay.scoring.online.otlp``).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool

from assay.api.auth import require_principal
from assay.api.body_limit import body_limit
from assay.scoring.errors import AssayError
from assay.scoring.online import otlp
from assay.scoring.online.spans import store_spans
from assay.scoring.store.db import transaction
from assay.scoring.store.models import utcnow
from assay.settings import get_settings

log = logging.getLogger(__name__)

router = APIRouter(tags=["online"])

_DESCRIPTION = (
    "An OTLP/HTTP ExportTraceServiceRequest, protobuf (application/x-protobuf) or OTLP/JSON (application/json), "
    "optionally gzip (Content-Encoding: gzip). The answer is an ExportTraceServiceResponse in the same encoding "
    "(partialSuccess counts refused spans), or a google.rpc.Status with 400, 401, 413 or 415."
)


def _answer(status: int, body: bytes, encoding: str) -> Response:
    return Response(content=body, status_code=status, media_type=encoding)


def _error(error: otlp.OtlpError, encoding: str) -> Response:
    return _answer(error.status, otlp.status_body(encoding, error), encoding)


@router.post(
    "/v1/traces",
    summary="Receive OpenTelemetry traces (OTLP/HTTP)",
    description=_DESCRIPTION,
    response_class=Response,
    responses={
        200: {"description": "ExportTraceServiceResponse", "content": {otlp.PROTOBUF: {}, otlp.JSON: {}}},
        400: {"description": "google.rpc.Status: a malformed request, or every span refused"},
        401: {"description": "google.rpc.Status: no valid API key"},
        413: {"description": "google.rpc.Status: the body, as sent or decompressed, is too large"},
        415: {"description": "google.rpc.Status: not an OTLP encoding"},
        503: {"description": "google.rpc.Status: the span store is unavailable (the exporter retries)"},
    },
)
@body_limit("otlp_max_body_bytes")
async def receive_traces(request: Request) -> Response:
    declared = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    # Errors are answered in the request's encoding; one this receiver does not speak gets JSON.
    encoding = declared if declared in otlp.ENCODINGS else otlp.JSON
    try:
        await require_principal(request)
    except AssayError as exc:
        return _error(otlp.OtlpError(exc.status_code, exc.message), encoding)
    settings = get_settings()
    try:
        otlp.media_type(declared)
        # Over ASSAY_OTLP_MAX_BODY_BYTES as sent, the body-limit middleware answers 413 (assay.api.body_limit).
        body = await request.body()
        data = otlp.decompress(body, request.headers.get("content-encoding"), settings.otlp_max_decompressed_bytes)
        parsed = otlp.parse_request(data, encoding)
        decoded = otlp.decode_spans(parsed, settings.otlp_max_attribute_bytes)
        if decoded.rejected and not decoded.rows:
            raise otlp.OtlpError(400, f"every span was refused: {decoded.error_message}")
    except otlp.OtlpError as error:
        return _error(error, encoding)
    try:
        await run_in_threadpool(_store, decoded.rows)
    except OperationalError as exc:
        # The store is unreachable: 503 is one of the codes an exporter retries (with backoff), so the
        # spans are sent again rather than lost.
        log.warning("OTLP export not stored, the database is unreachable: %s", exc)
        return _error(otlp.OtlpError(503, "the span store is unavailable; retry later"), encoding)
    return _answer(200, otlp.response_body(encoding, decoded), encoding)


def _store(rows: list[dict]) -> None:  # type: ignore[type-arg]
    with transaction() as session:
        store_spans(session, rows, utcnow())
