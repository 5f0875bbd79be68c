"""Loopback ports for the servers a test starts as subprocesses (the API, Flower, private Redis and
PostgreSQL instances).

The usual trick — bind port 0, close, hand the number to a child — picks from the kernel's ephemeral
range, where any outgoing connection (and there are many: Postgres, Redis, HTTP) can take the port
before the child binds it; with pytest-xdist several test processes also pick at the same moment. So
the ports come from below the ephemeral range, each xdist worker from its own block, and each process
walks its block from a random start (two runs on one machine rarely meet; one process never hands out
a port twice in a row). A port is handed out only if it can be bound right now.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading

# Blocks of this many ports, one per xdist worker, counted down from the bottom of the ephemeral range.
_BLOCK = 500
_LOWEST = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _worker_index() -> int:
    """0 for a run without xdist or its first worker (``gw0``), n for ``gwn``."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def _block() -> range:
    top = _ephemeral_low()
    blocks = max(1, (top - _LOWEST) // _BLOCK)
    start = top - _BLOCK * (1 + _worker_index() % blocks)
    return range(start, start + _BLOCK)


def _candidates() -> itertools.cycle[int]:
    block = _block()
    first = random.randrange(len(block))
    return itertools.cycle([*block[first:], *block[:first]])


_lock = threading.Lock()
_next: itertools.cycle[int] | None = None


def free_port() -> int:
    """A loopback port nobody listens on now, from this process's block."""
    global _next
    with _lock:
        if _next is None:
            _next = _candidates()
        for _ in range(_BLOCK):
            port = next(_next)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError(f"no free loopback port in {_block()}")
