"""Idempotency-Key: a retried request returns what the first one created, and nothing else does.

A key belongs to the principal that sent it (``Batch.idempotency_scope``, ``key:NAME`` or
``proxy:NAME``), so two users never share one, nor do a proxy user and an API key of the same name. The batch it created keeps a fingerprint of the request: its route and parameters, and the
SHA-256 of its body (known only once a streamed upload has been read to the end). A request with
the same key and the same fingerprint is a retry and gets the first batch back; the same key with
another fingerprint is refused (422), never answered with a batch made from something else. While
the first request is still running (an upload still streaming), the key is held, and a retry gets
409 at once instead of waiting on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from assay.scoring.errors import Conflict, InvalidInput
from assay.scoring.store.models import Batch
from assay.scoring.suites.loader import canonical_json


@dataclass(frozen=True)
class IdempotencyKey:
    """An ``Idempotency-Key`` as a principal sent it, with what the request asked for besides its body."""

    key: str
    scope: str  # the principal (``key:NAME`` or ``proxy:NAME``)
    request: Mapping[str, Any] = field(default_factory=dict)  # the route and its parameters

    def fingerprint(self, body_sha256: str | None = None) -> str:
        return hashlib.sha256(canonical_json({**self.request, "body_sha256": body_sha256}).encode()).hexdigest()


def hold(session: Session, idem: IdempotencyKey) -> None:
    """Hold the key for the caller's transaction; 409 while another transaction holds it.

    On Postgres a transaction-scoped advisory lock: taken without waiting, freed by the commit or
    rollback. SQLite (embedded mode) has one writer at a time, so there is nothing to hold."""
    if session.get_bind().dialect.name != "postgresql":
        return
    digest = hashlib.sha256(f"idempotency\0{idem.scope}\0{idem.key}".encode()).digest()
    lock_id = int.from_bytes(digest[:8], "big", signed=True)
    if not session.scalar(text("SELECT pg_try_advisory_xact_lock(:lock_id)"), {"lock_id": lock_id}):
        raise Conflict(
            f"a request with Idempotency-Key {idem.key!r} is still in progress; retry once it has finished",
            idempotency_key=idem.key,
        )


def batch_for(session: Session, idem: IdempotencyKey) -> Batch | None:
    """The batch a request with this key (from this principal) created."""
    return session.scalar(
        select(Batch).where(Batch.idempotency_scope == idem.scope, Batch.idempotency_key == idem.key)
    )


def check_retry(batch: Batch, idem: IdempotencyKey, fingerprint: str) -> None:
    """Refuse a request that reuses the key of ``batch`` for something else (422)."""
    # A batch stored before fingerprints were kept has none: it is replayed, as it was then.
    if batch.idempotency_fingerprint is not None and batch.idempotency_fingerprint != fingerprint:
        raise InvalidInput(
            f"Idempotency-Key {idem.key!r} was already used for a different request (batch {batch.id}); "
            "a retry must repeat the same route, parameters and body. Use a new key for a new request.",
            idempotency_key=idem.key,
            batch_id=str(batch.id),
        )
