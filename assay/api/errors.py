"""One place that maps errors to HTTP: domain errors carry their status; nothing leaks a stack trace, and
no problem text, in an error or in a 200's ``ProblemText`` field, shows where the server keeps things."""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from assay.scoring.errors import AssayError
from assay.settings import REPO_ROOT, get_settings

log = logging.getLogger(__name__)

# An absolute path starts here: not inside a URL ("http://host/x") nor a longer word.
_NOT_IN_A_WORD = r"(?<![\w.:/~-])"
_ABSOLUTE_PATH = re.compile(_NOT_IN_A_WORD + r"/[\w.@+~-]+(?:/[\w.@+~-]*)*")
# SQLAlchemy's rendering of a failed statement: "[SQL: ...]", "[parameters: ...]", "(Background on ...)".
_SQL_TEXT = re.compile(r"\s*(\[SQL: |\[parameters: |\(Background on this error at: ).*", re.DOTALL)


def _server_directories() -> list[tuple[str, str]]:
    """(directory, the label that replaces it) for the server's own places, longest first."""
    settings = get_settings()
    places = [
        (settings.data_dir, "<data dir>"),
        (settings.config_dir, "<config dir>"),
        (Path(tempfile.gettempdir()), "<temp dir>"),
        (REPO_ROOT, "<server path>"),
        (Path.cwd(), "<server path>"),
        (Path(sys.prefix), "<server path>"),
        (Path(os.path.expanduser("~")), "<server path>"),
    ]
    found: dict[str, str] = {}
    for path, label in places:
        for form in {str(path.absolute()), str(path.resolve())}:
            if form != "/":
                found.setdefault(form, label)
    return sorted(found.items(), key=lambda item: -len(item[0]))


def public_text(text: str) -> str:
    """``text`` as a client may see it: server directories by a label, any other absolute path on
    this machine as ``<server path>``, SQL statements and their parameters cut off. Error messages
    describe the client's input; where the server keeps things stays in its log."""
    cleaned = _SQL_TEXT.sub("", text)
    for directory, label in _server_directories():
        cleaned = re.sub(_NOT_IN_A_WORD + re.escape(directory) + r"(?![\w.@+~-])", label, cleaned)
    top_level = set(os.listdir("/"))

    def server_path(match: re.Match[str]) -> str:
        return "<server path>" if match.group().split("/")[1] in top_level else match.group()

    cleaned = _ABSOLUTE_PATH.sub(server_path, cleaned)
    if cleaned != text:
        log.info("kept server details out of an error response: %s", text)
    return cleaned


# A response field that carries a problem's text — why a suite does not load or validate, why a
# component or a score failed, why a line was refused — is declared ``ProblemText``: it leaves through
# ``public_text`` as error bodies do, whatever route or status (a 200 too) carries it.
ProblemText = Annotated[str, AfterValidator(public_text)]


def _public(value: Any) -> Any:
    if isinstance(value, str):
        return public_text(value)
    if isinstance(value, dict):
        return {key: _public(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_public(item) for item in value]
    return value


class RefuseNulInUrl:
    """422 for a NUL byte in the path or query string: no store column can hold one, and Postgres
    would answer a query carrying one with an error (a 500) rather than "no such thing"."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = scope.get("query_string", b"").lower()
            if b"%00" in query or b"\x00" in query or "\x00" in scope.get("path", ""):
                response = JSONResponse(
                    {"error": "invalid_request", "message": "the URL contains a NUL character (%00), which is never valid here"},
                    status_code=422,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_middleware(RefuseNulInUrl)

    @app.exception_handler(AssayError)
    async def _domain(request: Request, exc: AssayError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        return JSONResponse(_public(exc.to_dict()), status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"location": ".".join(str(p) for p in err.get("loc", ())), "message": public_text(err.get("msg", ""))}
            for err in exc.errors()[:20]
        ]
        return JSONResponse(
            {"error": "invalid_request", "message": "the request is not valid", "details": {"errors": errors}},
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": "http_error", "message": public_text(str(exc.detail))}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(ClientDisconnect)
    async def _disconnect(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return JSONResponse({"error": "client_disconnected", "message": "the upload was cut off"}, status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            {"error": "internal_error", "message": "an internal error occurred; it has been logged"}, status_code=500
        )
