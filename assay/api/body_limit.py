"""A cap on every request body, enforced before any route reads it.

Each route has a limit: the one it declares with :func:`body_limit` (batch uploads, sessions,
score-query, dataset files), else ``ASSAY_MAX_BODY_BYTES``. A declared ``Content-Length`` over the
limit is answered 413 before the body is read; a body without one (chunked) is counted as it
streams, and the request is answered 413 the moment it passes the limit, whatever the route was
doing with it. The limit is read from the route the request was routed to, so a route added later
is capped without anyone remembering to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from assay.scoring.errors import PayloadTooLarge
from assay.settings import Settings, get_settings

DEFAULT_SETTING = "max_body_bytes"
_ATTRIBUTE = "__assay_body_limit__"

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


@dataclass(frozen=True)
class RouteLimit:
    """A route's body limit: a setting, plus bytes of framing the body carries around the data the
    setting measures (multipart boundaries and part headers)."""

    setting: str = DEFAULT_SETTING
    framing_bytes: int = 0

    def bytes(self) -> int:
        return int(getattr(get_settings(), self.setting)) + self.framing_bytes

    def describe(self) -> str:
        name = f"ASSAY_{self.setting.upper()}"
        return f"{name} + {self.framing_bytes} bytes of multipart framing" if self.framing_bytes else name


def body_limit(setting: str, *, framing_bytes: int = 0) -> Callable[[Endpoint], Endpoint]:
    """Declare that a route's body may be as large as the named setting (instead of
    ``max_body_bytes``). Put it under the route decorator."""
    if setting not in Settings.model_fields:
        raise ValueError(f"no setting {setting!r}")

    def declare(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, _ATTRIBUTE, RouteLimit(setting, framing_bytes))
        return endpoint

    return declare


def route_limit(endpoint: Any) -> RouteLimit:
    """The body limit of a route's endpoint (undeclared, or no route at all: the default)."""
    return getattr(endpoint, _ATTRIBUTE, None) or RouteLimit()


class BodyTooLarge(PayloadTooLarge):
    def __init__(self, limit: RouteLimit, size: int) -> None:
        super().__init__(
            f"the request body is larger than this route's limit of {size} bytes ({limit.describe()})",
            limit_bytes=size,
            setting=limit.describe(),
        )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyLimit:
    """ASGI middleware applying each route's body limit (see the module's docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        limit: RouteLimit | None = None
        size = 0
        received = 0
        exceeded: BodyTooLarge | None = None
        started = False  # the app's response began before the limit was passed

        async def counted_receive() -> Message:
            nonlocal limit, size, received, exceeded
            if limit is None:
                # The first read comes after routing, which put the matched route's endpoint in
                # the scope: the router's own match, whatever the route table looks like.
                limit = route_limit(scope.get("endpoint"))
                size = limit.bytes()
                if declared is not None and declared > size:
                    exceeded = BodyTooLarge(limit, size)
                    raise exceeded  # before a byte of the body is read
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > size:
                    exceeded = BodyTooLarge(limit, size)
                    raise exceeded
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded is not None and not started:
                # The route answered a body it could not finish reading (FastAPI turns a failed
                # read into a 400, a handler may map it otherwise): the answer is the 413 below.
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if exceeded is None or started:
                raise
        if exceeded is not None and not started:
            # Connection: close: the rest of the body is never read, so the connection is not reused.
            response = JSONResponse(exceeded.to_dict(), status_code=exceeded.status_code, headers={"Connection": "close"})
            await response(scope, receive, send)


def install_body_limits(app: FastAPI) -> None:
    """Cap every route's body. Installed last, it is the outermost middleware: it counts the body
    before anything else can read it."""
    app.add_middleware(BodyLimit)
