"""A value made once per process: on first use, and again in a forked child, which must not use its
parent's (threads, sockets and event loops do not survive a fork)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._value: T | None = None
        self._pid: int | None = None

    def get(self) -> T:
        with self._lock:
            if self._pid != os.getpid():
                self._value = self._make()
                self._pid = os.getpid()
            return self._value  # type: ignore[return-value]
