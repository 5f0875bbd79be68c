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
import socket
import threading
import time
from collections import deque
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

Failure = Literal["error", "slow", "not_json", "invalid"]


class FakeHistory:
    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.failures: deque[dict[str, Any]] = deque()
        self.calls: list[str] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/api/v1/history/sessions/{session_id:path}", self._get, methods=["GET"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False, timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True, name="fake-history")

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

    def start(self) -> FakeHistory:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake history service did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> FakeHistory:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
