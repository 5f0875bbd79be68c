"""One place that maps errors to HTTP: domain errors carry their status; nothing leaks a stack trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from assay.scoring.errors import AssayError

log = logging.getLogger(__name__)


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
        return JSONResponse(exc.to_dict(), status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"location": ".".join(str(p) for p in err.get("loc", ())), "message": err.get("msg", "")}
            for err in exc.errors()[:20]
        ]
        return JSONResponse(
            {"error": "invalid_request", "message": "the request is not valid", "details": {"errors": errors}},
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": "http_error", "message": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
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
