"""The process's judge event loop: every judge call of a process runs on one asyncio loop, on one
daemon thread, through ``AsyncAnthropic`` clients that live on it.

Callers on other threads (a worker's task threads, a test) hand it coroutines with ``submit`` and
wait for their futures. With many calls in flight one loop costs less CPU than a thread per call (no
GIL hand-offs between dozens of threads; BENCHMARKS.md, issue 22's second step: 5.90 -> 4.43 ms per
judgment at 64 in flight, though about 0.4 ms more at zero latency and 16), and a call waiting for the
provider, a retry's backoff or the rate governor holds no thread.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from assay.per_process import PerProcess

T = TypeVar("T")
C = TypeVar("C")


class JudgeLoop:
    """An asyncio event loop running forever on its own daemon thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="assay-judge-loop", daemon=True)
        self._thread.start()
        self._clients: list[Any] = []
        atexit.register(self._close_clients)

    def own(self, client: C) -> C:
        """Close ``client`` (an ``AsyncAnthropic``) on this loop when the process exits: its aiohttp
        session lives on the loop and must be closed there, not left to the garbage collector."""
        self._clients.append(client)
        return client

    def _close_clients(self) -> None:
        if not self._clients or not self._thread.is_alive():
            return

        async def close_all() -> None:
            await asyncio.gather(*(client.close() for client in self._clients), return_exceptions=True)

        try:
            self.submit(close_all()).result(timeout=5)
        except Exception:  # exiting anyway: a client that cannot close in time is dropped
            pass

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coro`` on the loop; its result (or exception) arrives in the returned future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (from any thread but the loop's own)."""
        return self.submit(coro).result()


_judge_loop = PerProcess(JudgeLoop)


def judge_loop() -> JudgeLoop:
    """This process's judge loop, started on first use (a forked child starts its own)."""
    return _judge_loop.get()
