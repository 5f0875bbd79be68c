"""The OpenAI fake's Batch API (``assay/dev/openai_server.py``), driven through the real ``openai`` SDK.

- ``POST /v1/files`` (multipart, ``purpose`` ``batch``; over 200 MB is a 400), ``GET /v1/files`` (every
  file held, newest first), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content`` and
  ``DELETE /v1/files/{id}`` (``{"id", "object": "file", "deleted": true}``; 404 for a file it does not
  hold): the input file, and the output and error files a batch writes.
- ``POST /v1/batches`` (``input_file_id``, ``endpoint`` ``/v1/chat/completions``, ``completion_window``
  ``24h``) and ``GET /v1/batches/{id}``. A batch is ``validating`` for the first tenth of
  ``batch_processing_seconds``, then ``in_progress`` (``request_counts.completed`` grows evenly),
  ``finalizing`` for the last tenth, then ``completed`` with its ``output_file_id`` (successful lines)
  and ``error_file_id`` (failed lines), each ``null`` when it would be empty. As on the real API the
  file is read at validation: a line that is not JSON, a repeated ``custom_id``, a ``url`` other than
  the batch's endpoint, more than 50,000 requests or more than one ``model`` in the file make the batch
  ``failed`` with ``errors`` and no file at all.
- Each request's body is checked as ``/v1/chat/completions`` checks it: an invalid one is a failed line
  with its 400, not a call. Results come in reverse order (the API promises none).

Outcomes are scripted with the Anthropic fake's ``/_fake/batch_outcomes`` (``FakeControl.batch_outcomes``):
``succeeded``; ``errored`` (a failed line with a 500); ``expired`` (the batch ends ``expired`` at its
time: the lines scripted so are failed lines with ``error.code`` ``batch_expired``, the others are
answered); ``malformed``, ``out_of_range``, ``truncated`` (answers of that kind, status 200).
``/_fake/calls`` counts each endpoint in ``batch_api``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from assay.dev.fake_answers import _OUTCOME_KIND, BatchOutcome, _item_key

MAX_BATCH_REQUESTS = 50_000
MAX_FILE_BYTES = 200 * 1024 * 1024
ENDPOINT = "/v1/chat/completions"
BATCH_ENDPOINTS = ("upload", "files", "file", "content", "delete_file", "create", "retrieve")
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "file", "bytes": len(self.data), "created_at": self.created_at,
            "filename": self.filename, "purpose": self.purpose, "status": "processed",
        }


@dataclass
class _Batch:
    id: str
    input_file_id: str
    created_at: float
    processing_seconds: float
    lines: list[dict[str, Any]]  # the parsed input, empty when validation failed
    outcomes: list[BatchOutcome]
    errors: list[dict[str, Any]] | None  # validation errors: the batch fails
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})

    def at(self, share: float) -> float:
        return self.created_at + share * self.processing_seconds


def _error_body(status: int, error_type: str, message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _refused(status: int, message: str) -> JSONResponse:
    return JSONResponse(_error_body(status, "invalid_request_error", message), status)


def _validate(data: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The input file's requests, or what makes the batch fail validation."""
    lines: list[dict[str, Any]] = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            return [], [{"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.", "line": number}]
        if not isinstance(line, dict) or not isinstance(line.get("body"), dict) or not line.get("custom_id"):
            return [], [{"code": "invalid_request", "message": "custom_id, method, url and body are required.", "line": number}]
        if line.get("method") != "POST" or line.get("url") != ENDPOINT:
            message = f"The URL provided for this request does not match the batch endpoint {ENDPOINT}."
            return [], [{"code": "invalid_url", "message": message, "line": number}]
        lines.append(line)
    if not lines:
        return [], [{"code": "empty_file", "message": "The batch input file is empty.", "line": None}]
    if len(lines) > MAX_BATCH_REQUESTS:
        message = f"The batch input file has {len(lines)} requests, more than the {MAX_BATCH_REQUESTS} allowed."
        return [], [{"code": "too_many_requests", "message": message, "line": None}]
    repeated = sorted(k for k, n in Counter(line["custom_id"] for line in lines).items() if n > 1)
    if repeated:
        message = f"The custom_id {repeated[0]!r} is used more than once; custom_ids must be unique."
        return [], [{"code": "duplicate_custom_id", "message": message, "line": None}]
    models = sorted({str(line["body"].get("model")) for line in lines})
    if len(models) > 1:
        message = f"A batch input file may hold requests for one model only; this one names {', '.join(models)}."
        return [], [{"code": "mismatched_model", "message": message, "line": None}]
    return lines, []


class BatchAPI:
    """The Batch API's state, on the fake's state (``_OpenAIState``): its outcomes, calls and answers."""

    def __init__(self, state: Any, invalid: Callable[[dict[str, Any]], str | None]) -> None:
        self.state = state
        self.invalid = invalid
        self.reset()

    def reset(self) -> None:
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.state.batch_api = Counter(dict.fromkeys(BATCH_ENDPOINTS, 0))

    def add_file(self, filename: str, purpose: str, data: bytes) -> _File:
        stored = _File(f"file-{secrets.token_hex(12)}", filename, purpose, data, int(time.time()))
        self.files[stored.id] = stored
        return stored

    def create(self, input_file: _File) -> _Batch:
        lines, errors = _validate(input_file.data)
        outcomes: list[BatchOutcome] = []
        for position, line in enumerate(lines, start=1):
            nth = self.state.every_nth
            default: BatchOutcome = nth.outcome if nth and position % nth.n == 0 else "succeeded"
            outcomes.append(self.state.batch_outcomes.pop(str(line["custom_id"]), default))
        seconds = self.state.config.batch_processing_seconds
        batch = _Batch(f"batch_{secrets.token_hex(12)}", input_file.id, time.time(), seconds, lines, outcomes, errors or None)
        batch.counts["total"] = len(lines)
        self.batches[batch.id] = batch
        return batch

    def settle_all(self) -> None:
        now = time.time()
        for batch in self.batches.values():
            self.settle(batch, now)

    def settle(self, batch: _Batch, now: float) -> None:
        """Move ``batch`` along its timeline (lazily, whenever anyone looks)."""
        if batch.status in ("completed", "expired", "failed"):
            return
        if batch.errors is not None:
            if now >= batch.at(0.1):
                batch.status = "failed"
            return
        if now >= batch.at(1.0):
            self._finish(batch)
        elif now >= batch.at(0.9):
            batch.status = "finalizing"
        elif now >= batch.at(0.1):
            batch.status = "in_progress"
            done = len(batch.lines) * (now - batch.at(0.1)) / max(1e-9, batch.at(0.9) - batch.at(0.1))
            batch.counts["completed"] = min(len(batch.lines), int(done))

    def _finish(self, batch: _Batch) -> None:
        outputs, failures = [], []
        for line, outcome in zip(batch.lines, batch.outcomes):
            result = self._result(batch, line, outcome)
            (outputs if result["response"] is not None and result["response"]["status_code"] == 200 else failures).append(result)
        batch.counts.update(completed=len(outputs), failed=len(failures))
        if outputs:
            batch.output_file_id = self._results_file(batch, "output", outputs).id
        if failures:
            batch.error_file_id = self._results_file(batch, "error", failures).id
        batch.status = "expired" if "expired" in batch.outcomes else "completed"

    def _results_file(self, batch: _Batch, what: str, lines: list[dict[str, Any]]) -> _File:
        data = b"".join(json.dumps(line).encode() + b"\n" for line in reversed(lines))
        return self.add_file(f"{batch.id}_{what}.jsonl", f"batch_{what}", data)

    def _result(self, batch: _Batch, line: dict[str, Any], outcome: BatchOutcome) -> dict[str, Any]:
        custom_id, body = str(line["custom_id"]), line["body"]
        result: dict[str, Any] = {"id": f"batch_req_{secrets.token_hex(8)}", "custom_id": custom_id, "response": None, "error": None}
        if outcome == "expired":
            result["error"] = {"code": "batch_expired", "message": EXPIRED_MESSAGE}
            return result
        request_id = f"req_fake_{secrets.token_hex(6)}"
        problem = self.invalid(body)
        if problem:  # refused as /v1/chat/completions refuses it: not a call
            result["response"] = {"status_code": 400, "request_id": request_id, "body": _error_body(400, "invalid_request_error", problem)}
            return result
        item_key, kind = _item_key(body["messages"]), _OUTCOME_KIND[outcome]
        self.state.sequence += 1
        call = self.state.record_call(body, item_key, kind, batch.at(1.0), lane="batch", batch_id=batch.id, custom_id=custom_id)
        call["repair"] = any(m.get("role") == "assistant" for m in body["messages"])
        call["request"] = {k: v for k, v in body.items() if k != "messages"}
        if outcome == "errored":
            call["status"] = 500
            error = _error_body(500, "server_error", "The server had an error while processing your request.")
            result["response"] = {"status_code": 500, "request_id": request_id, "body": error}
            return result
        result["response"] = {"status_code": 200, "request_id": request_id, "body": self.state.completion(body, item_key, kind)}
        return result

    def to_json(self, batch: _Batch) -> dict[str, Any]:
        ended = batch.status in ("completed", "expired", "failed")
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": ENDPOINT,
            "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created_at),
            "in_progress_at": int(batch.at(0.1)) if batch.status not in ("validating", "failed") else None,
            "expires_at": int(batch.created_at) + 24 * 3600,
            "finalizing_at": int(batch.at(0.9)) if batch.status in ("finalizing", "completed", "expired") else None,
            "completed_at": int(batch.at(1.0)) if batch.status == "completed" else None,
            "failed_at": int(batch.at(0.1)) if batch.status == "failed" else None,
            "expired_at": int(batch.at(1.0)) if batch.status == "expired" else None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": dict(batch.counts) if ended or batch.status != "validating" else {"total": 0, "completed": 0, "failed": 0},
            "metadata": None,
        }

    def routes(self) -> list[Route]:
        return [
            Route("/v1/files", self._upload, methods=["POST"]),
            Route("/v1/files", self._list_files, methods=["GET"]),
            Route("/v1/files/{file_id}", self._file, methods=["GET"]),
            Route("/v1/files/{file_id}", self._delete_file, methods=["DELETE"]),
            Route("/v1/files/{file_id}/content", self._content, methods=["GET"]),
            Route("/v1/batches", self._create, methods=["POST"]),
            Route("/v1/batches/{batch_id}", self._retrieve, methods=["GET"]),
        ]

    def _start(self, request: Request, endpoint: str) -> Response | None:
        self.state.batch_api[endpoint] += 1
        self.settle_all()
        if not request.headers.get("authorization"):
            return JSONResponse(_error_body(401, "invalid_request_error", "You didn't provide an API key.", "invalid_api_key"), 401)
        return None

    async def _upload(self, request: Request) -> Response:
        if refused := self._start(request, "upload"):
            return refused
        form = await request.form(max_part_size=MAX_FILE_BYTES + 1)
        upload, purpose = form.get("file"), form.get("purpose")
        if upload is None or isinstance(upload, str):
            return _refused(400, "'file' is a required property")
        if purpose != "batch":
            return _refused(400, f"'{purpose}' is not one of ['assistants', 'batch', 'fine-tune', 'vision', 'user', 'evals']")
        data = await upload.read()
        if len(data) > MAX_FILE_BYTES:
            return _refused(400, f"File is too large ({len(data)} bytes): a batch input file may be at most 200 MB.")
        return JSONResponse(self.add_file(upload.filename or "upload.jsonl", "batch", data).to_json())

    def _find_file(self, request: Request) -> _File | Response:
        stored = self.files.get(request.path_params["file_id"])
        if stored is None:
            return _refused(404, f"No such File object: {request.path_params['file_id']}")
        return stored

    async def _file(self, request: Request) -> Response:
        if refused := self._start(request, "file"):
            return refused
        stored = self._find_file(request)
        return stored if isinstance(stored, Response) else JSONResponse(stored.to_json())

    async def _list_files(self, request: Request) -> Response:
        if refused := self._start(request, "files"):
            return refused
        held = sorted(self.files.values(), key=lambda stored: stored.created_at, reverse=True)
        data = [stored.to_json() for stored in held]
        return JSONResponse({"object": "list", "data": data, "first_id": None, "last_id": None, "has_more": False})

    async def _delete_file(self, request: Request) -> Response:
        if refused := self._start(request, "delete_file"):
            return refused
        stored = self._find_file(request)
        if isinstance(stored, Response):
            return stored
        del self.files[stored.id]
        return JSONResponse({"id": stored.id, "object": "file", "deleted": True})

    async def _content(self, request: Request) -> Response:
        if refused := self._start(request, "content"):
            return refused
        stored = self._find_file(request)
        return stored if isinstance(stored, Response) else Response(stored.data, media_type="application/octet-stream")

    async def _create(self, request: Request) -> Response:
        if refused := self._start(request, "create"):
            return refused
        try:
            body = await request.json()
        except ValueError:
            return _refused(400, "We could not parse the JSON body.")
        if body.get("endpoint") != ENDPOINT:
            return _refused(400, f"Invalid endpoint {body.get('endpoint')!r}: this fake batches {ENDPOINT} only.")
        if body.get("completion_window") != "24h":
            return _refused(400, "completion_window must be '24h'.")
        input_file = self.files.get(str(body.get("input_file_id")))
        if input_file is None or input_file.purpose != "batch":
            return _refused(400, f"Invalid input_file_id {body.get('input_file_id')!r}: upload it with purpose 'batch'.")
        return JSONResponse(self.to_json(self.create(input_file)))

    async def _retrieve(self, request: Request) -> Response:
        if refused := self._start(request, "retrieve"):
            return refused
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None:
            return _refused(404, f"No batch found with id {request.path_params['batch_id']!r}")
        return JSONResponse(self.to_json(batch))
