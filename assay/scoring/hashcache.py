"""A per-process cache for content addressed by hash: what a hash names never changes, so a value,
once loaded, never goes stale. Bounded (oldest entry out first) and thread-safe."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class HashCache(Generic[T]):
    def __init__(self, max_entries: int) -> None:
        self._values: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries

    def get(self, content_hash: str, load: Callable[[], T]) -> T:
        with self._lock:
            if content_hash in self._values:
                return self._values[content_hash]
        value = load()  # outside the lock: a slow load must not stall other hashes
        with self._lock:
            self._values[content_hash] = value
            while len(self._values) > self._max:
                self._values.popitem(last=False)
        return value
