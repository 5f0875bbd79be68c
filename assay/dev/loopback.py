"""An ASGI app served by uvicorn in a background thread on 127.0.0.1 — the common part of the
loopback fakes (the Anthropic API, the history service)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

# Quiet, and quick to stop: hanging requests poll for the client's disconnect on shutdown.
SERVER_DEFAULTS: dict[str, Any] = {"log_level": "warning", "access_log": False, "timeout_graceful_shutdown": 1}


class LoopbackServer:
    def __init__(self, app: Any, *, name: str, port: int = 0, **options: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self.port = self._socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.name = name
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, **{**SERVER_DEFAULTS, **options})
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True, name=name
        )

    def start(self) -> Any:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
