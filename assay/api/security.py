"""Installs the request-level defences of ``assay.api.auth`` on an app: the CSRF check before every
route, and the throttle's 429 (with ``Retry-After``) for a client that sent too many wrong keys."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from assay.api.csrf import CsrfMiddleware
from assay.api.throttle import TooManyFailures


def install_security(app: FastAPI) -> None:
    app.add_middleware(CsrfMiddleware)

    @app.exception_handler(TooManyFailures)
    async def _too_many_failures(request: Request, exc: TooManyFailures) -> JSONResponse:
        return JSONResponse(exc.to_dict(), status_code=exc.status_code, headers={"Retry-After": str(exc.retry_after)})
