"""The optional history service: where a session not stored yet is fetched from, by id.

Contract: ``GET {base_url}/api/v1/history/sessions/{session_id}`` answers 200 with the session as
``POST /api/v1/sessions`` takes it (an ``AlertSessionItem``), bare or under a ``"session"`` key; keys
the item does not know are ignored. 404 means the service does not know the session.

Errors map to API errors: unknown session → 404; the service unreachable, answering an error or
something that is not a valid session → 502 (``history_service_error``); no answer in time → 504
(``history_service_timeout``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from assay.scoring.errors import AssayError, NotFound
from assay.scoring.sessions.items import AlertSessionItem
from assay.settings import get_settings

PATH = "/api/v1/history/sessions/{session_id}"


class HistoryServiceError(AssayError):
    status_code = 502
    code = "history_service_error"


class HistoryServiceTimeout(AssayError):
    status_code = 504
    code = "history_service_timeout"


def configured_base_url() -> str | None:
    """``ASSAY_HISTORY_SERVICE_URL`` (settings ``history_service_url``); None: no history service."""
    return getattr(get_settings(), "history_service_url", None) or None


def configured_timeout() -> float:
    return float(getattr(get_settings(), "history_service_timeout_seconds", 10.0))


class HistoryClient:
    def __init__(self, base_url: str, timeout: float = 10.0, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.transport = transport

    def fetch(self, session_id: str) -> AlertSessionItem:
        url = self.base_url + PATH.format(session_id=quote(session_id, safe=""))
        where = f"the history service at {self.base_url}"
        try:
            # trust_env=False: no proxy from the environment; the configured URL is the one called.
            with httpx.Client(timeout=self.timeout, trust_env=False, transport=self.transport) as client:
                response = client.get(url, headers={"Accept": "application/json"})
        except httpx.TimeoutException:
            raise HistoryServiceTimeout(f"{where} did not answer within {self.timeout:g}s", session_id=session_id) from None
        except httpx.HTTPError as exc:
            raise HistoryServiceError(f"cannot reach {where}: {type(exc).__name__}: {exc}", session_id=session_id) from None
        if response.status_code == 404:
            raise NotFound(f"session {session_id!r} is not stored, and {where} does not know it either")
        if response.status_code != 200:
            raise HistoryServiceError(
                f"{where} answered {response.status_code} for session {session_id!r}: {response.text[:300]}",
                session_id=session_id,
                upstream_status=response.status_code,
            )
        try:
            body: Any = response.json()
        except ValueError:
            raise HistoryServiceError(f"{where} answered with something that is not JSON", session_id=session_id) from None
        if isinstance(body, dict) and isinstance(body.get("session"), dict):
            body = body["session"]
        if not isinstance(body, dict):
            raise HistoryServiceError(f"{where} answered with a JSON {type(body).__name__}, not a session", session_id=session_id)
        known = {k: v for k, v in body.items() if k in AlertSessionItem.model_fields}
        try:
            item = AlertSessionItem.model_validate(known)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise HistoryServiceError(
                f"{where} returned an invalid session: {loc}: {first['msg']}", session_id=session_id
            ) from None
        if item.session_id != session_id:
            raise HistoryServiceError(
                f"{where} returned session {item.session_id!r} when asked for {session_id!r}", session_id=session_id
            )
        return item


def configured_client() -> HistoryClient | None:
    base = configured_base_url()
    return HistoryClient(base, configured_timeout()) if base else None
