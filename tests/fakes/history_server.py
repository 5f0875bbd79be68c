"""A loopback fake of TARSy's history service, for the alert-session tests.

``GET /api/v1/history/sessions/{session_id}`` answers the session put with ``fake.put(session)``
(under a ``"session"`` key, with an extra key the client must ignore), else 404. ``fake.fail(...)``
makes the next calls misbehave: an error status, a delay past the client's timeout, a body that is
not JSON, or one that is not a valid session. Served by uvicorn on 127.0.0.1 in a background thread::

    with FakeHistory() as fake:
        fake.put({"session_id": "s1", ...})
        ... settings history_service_url = fake.base_url ...
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

Failure = Literal["error", "slow", "not_json", "invalid"]


class FakeHistory(LoopbackServer):
    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.failures: deque[dict[str, Any]] = deque()
        self.calls: list[str] = []
        app = Starlette(routes=[Route("/api/v1/history/sessions/{session_id:path}", self._get, methods=["GET"])])
        super().__init__(app, name="fake-history")

    def put(self, session: dict[str, Any]) -> None:
        self.sessions[session["session_id"]] = session

    def fail(self, kind: Failure, *, status: int = 500, delay: float = 5.0, times: int = 1) -> None:
        for _ in range(times):
            self.failures.append({"kind": kind, "status": status, "delay": delay})

    async def _get(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        self.calls.append(session_id)
        if self.failures:
            failure = self.failures.popleft()
            if failure["kind"] == "error":
                return JSONResponse({"detail": "history database unavailable"}, status_code=failure["status"])
            if failure["kind"] == "slow":
                await asyncio.sleep(failure["delay"])
            elif failure["kind"] == "not_json":
                return PlainTextResponse("<html>gateway</html>", status_code=200)
            elif failure["kind"] == "invalid":
                return JSONResponse({"session": {"session_id": session_id, "status": "completed"}})
        session = self.sessions.get(session_id)
        if session is None:
            return JSONResponse({"detail": f"session {session_id} not found"}, status_code=404)
        return JSONResponse({"session": {**session, "chain_id": "ignored-by-the-client"}, "history_version": 2})
