"""Framing between the worker-side client and the executor: 4-byte big-endian length + UTF-8 JSON.

JSON only (never pickle): a compromised executor can at worst send a wrong answer, never code.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

MAX_FRAME = 512 * 1024 * 1024  # datasets travel in frames (base64); results are far smaller


class ProtocolError(Exception):
    pass


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return struct.pack(">I", len(body)) + body


def write_frame(fd: int, message: dict[str, Any]) -> None:
    data = memoryview(encode_frame(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exact(fd: int, size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_size: int = MAX_FRAME) -> dict[str, Any]:
    (size,) = struct.unpack(">I", _read_exact(fd, 4))
    if size > max_size:
        raise ProtocolError(f"frame of {size} bytes exceeds {max_size}")
    message = json.loads(_read_exact(fd, size))
    if not isinstance(message, dict):
        raise ProtocolError("a frame holds a JSON object")
    return message
