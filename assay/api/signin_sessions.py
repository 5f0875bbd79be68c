"""Dashboard sign-in: a signed, HTTP-only, ``Secure``, ``SameSite=Lax`` session cookie naming a
sign-in recorded in the store.

Behind a trusted proxy (oauth2-proxy) the user is the proxy's ``X-Forwarded-User`` and no cookie is
needed. Otherwise the sign-in page takes an API key; when it matches one of ``ASSAY_API_KEYS`` the
dashboard records a row in ``signed_in_sessions`` for the user the key names (``name:key``; a bare
key's name is ``key-`` and 8 hex digits of its SHA-256) and sets ``assay_session``, whose value is::

    base64url(JSON {"s": session id, "u": user, "k": key fingerprint, "exp": epoch seconds})
    "." base64url(HMAC-SHA256(secret, that first part))

The session id is random; the row's id is its SHA-256, so a copy of the table opens no session. A
cookie is taken while its signature holds, it has not expired, the key it was opened with is still
configured, and its row exists and is not revoked: signing out sets ``revoked_at``, and so may an
operator (``UPDATE signed_in_sessions SET revoked_at = now() ...``); every API process sees it at
once. The key itself is never stored, only a 16-hex-digit SHA-256 fingerprint of it: removing the key
from ``ASSAY_API_KEYS``, or renaming it, signs out every session opened with it. The secret is
``ASSAY_SESSION_SECRET`` when set, else derived from the configured API keys (so rotating the keys
also signs everyone out, and every API process agrees on it without more configuration).

The JSON API accepts the cookie too (``cookie_user``, called from ``assay.api.auth``), so the
dashboard's own fetches need no key in the page. A session's CSRF token (``SessionData.csrf``, an
HMAC of its id, put in the pages' ``<meta name="csrf-token">``) is what ``assay.api.csrf`` asks of a
request that changes something. (Lax rather than Strict so that a link to a dashboard page from a
chat or a ticket opens the page instead of the sign-in form.)

This module imports nothing from ``assay.api.auth``, so ``auth`` may import it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import delete, select, update
from starlette.requests import Request
from starlette.responses import Response

from assay.scoring.errors import Unauthorized
from assay.scoring.store.db import transaction
from assay.scoring.store.models import SignedInSession
from assay.settings import ApiKey, configured_keys

COOKIE_NAME = "assay_session"
DEFAULT_MAX_AGE_SECONDS = 12 * 3600
COOKIE_PATH = "/"
SIGN_IN_PATH = "/dashboard/sign-in"  # the form that starts a session (assay.api.csrf checks its Origin)
_DERIVE_LABEL = b"assay-dashboard-session-v1"
_CSRF_LABEL = b"assay-session-csrf-v1"


@dataclass(frozen=True)
class SessionData:
    session_id: str  # random, carried in the cookie; its row's id is ``row_id(session_id)``
    user: str
    key_fingerprint: str
    expires_at: int
    csrf: str  # the CSRF token of the session's pages: an HMAC of its id


def key_fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _named_keys(settings: Any) -> list[ApiKey]:
    return configured_keys(settings) if getattr(settings, "api_keys", None) else []


def _api_keys(settings: Any) -> list[str]:
    return [k.key for k in _named_keys(settings)]


def _secret(settings: Any) -> bytes | None:
    configured = getattr(settings, "session_secret", None)
    if configured is not None:
        value = configured.get_secret_value() if hasattr(configured, "get_secret_value") else str(configured)
        if value:
            return value.encode()
    keys = sorted(_api_keys(settings))
    if not keys:
        return None
    return hmac.new(_DERIVE_LABEL, "\n".join(keys).encode(), hashlib.sha256).digest()


def max_age(settings: Any) -> int:
    return int(getattr(settings, "session_max_age_seconds", DEFAULT_MAX_AGE_SECONDS) or DEFAULT_MAX_AGE_SECONDS)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())


def signing_secret(settings: Any) -> bytes | None:
    """What signs session cookies and CSRF tokens (None when neither a secret nor a key is configured)."""
    return _secret(settings)


def row_id(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _csrf_token(secret: bytes, session_id: str) -> str:
    return _b64(hmac.new(secret, _CSRF_LABEL + b"\0" + session_id.encode(), hashlib.sha256).digest())


def matching_key(settings: Any, offered: str) -> ApiKey | None:
    """The configured API key (with its name) equal to ``offered`` (constant-time compare), or None."""
    found = None
    for key in _named_keys(settings):
        if hmac.compare_digest(offered.encode(), key.key.encode()):
            found = key
    return found


def issue(settings: Any, user: str, key: str, *, now: float | None = None) -> tuple[str, SessionData]:
    """A signed cookie value for ``user``, opened with API key ``key`` (not recorded: see ``start``)."""
    secret = _secret(settings)
    if secret is None:
        raise Unauthorized("no API keys are configured (ASSAY_API_KEYS): nobody can sign in")
    session_id = secrets.token_urlsafe(32)
    data = SessionData(
        session_id=session_id,
        user=user[:255],
        key_fingerprint=key_fingerprint(key),
        expires_at=int((now if now is not None else time.time()) + max_age(settings)),
        csrf=_csrf_token(secret, session_id),
    )
    claims = {"s": data.session_id, "u": data.user, "k": data.key_fingerprint, "exp": data.expires_at}
    body = _b64(json.dumps(claims).encode())
    return f"{body}.{_sign(secret, body)}", data


def _utc(epoch_seconds: float) -> datetime:
    return datetime.fromtimestamp(epoch_seconds, timezone.utc)


def start(settings: Any, user: str, key: str) -> str:
    """Sign ``user`` in: record the session and return its cookie value. Sessions past their expiry
    are deleted on the way (revoked ones are kept until then: their cookies still verify)."""
    value, data = issue(settings, user, key)
    now = _utc(time.time())
    with transaction() as db:
        db.execute(delete(SignedInSession).where(SignedInSession.expires_at <= now))
        db.add(
            SignedInSession(
                id=row_id(data.session_id),
                user_name=data.user,
                key_fingerprint=data.key_fingerprint,
                created_at=now,
                expires_at=_utc(data.expires_at),
            )
        )
    return value


def is_live(data: SessionData) -> bool:
    """Whether the session's row exists, unexpired and not revoked."""
    with transaction() as db:
        found = db.execute(
            select(SignedInSession.id).where(
                SignedInSession.id == row_id(data.session_id),
                SignedInSession.revoked_at.is_(None),
                SignedInSession.expires_at > _utc(time.time()),
            )
        ).first()
    return found is not None


def revoke(data: SessionData) -> None:
    with transaction() as db:
        db.execute(
            update(SignedInSession)
            .where(SignedInSession.id == row_id(data.session_id), SignedInSession.revoked_at.is_(None))
            .values(revoked_at=_utc(time.time()))
        )


def verify(settings: Any, value: str | None, *, now: float | None = None) -> SessionData | None:
    """The session in a cookie value, or None when it is missing, forged, expired or its key was removed.
    Whether it was revoked is the store's to say (``is_live``)."""
    if not value or "." not in value or len(value) > 4096:
        return None
    secret = _secret(settings)
    if secret is None:
        return None
    body, _, signature = value.partition(".")
    if not hmac.compare_digest(signature.encode(), _sign(secret, body).encode()):
        return None
    try:
        raw = json.loads(_unb64(body))
        session_id = str(raw["s"])
        data = SessionData(
            session_id=session_id,
            user=str(raw["u"]),
            key_fingerprint=str(raw["k"]),
            expires_at=int(raw["exp"]),
            csrf=_csrf_token(secret, session_id),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if data.expires_at <= (now if now is not None else time.time()):
        return None
    if (data.key_fingerprint, data.user) not in {(key_fingerprint(k.key), k.name) for k in _named_keys(settings)}:
        return None  # its key was removed, or renamed
    return data


def signed(request: Request, settings: Any) -> SessionData | None:
    """The request's session cookie when it verifies (without asking the store)."""
    return verify(settings, request.cookies.get(COOKIE_NAME))


def read(request: Request, settings: Any) -> SessionData | None:
    """The request's live session: its cookie verifies and the store has not revoked it."""
    data = signed(request, settings)
    return data if data is not None and is_live(data) else None


def cookie_user(request: Request, settings: Any) -> str | None:
    """The signed-in user for the JSON API, or None without a live session cookie."""
    data = read(request, settings)
    return data.user if data is not None else None


def set_cookie(response: Response, settings: Any, value: str) -> None:
    response.set_cookie(
        COOKIE_NAME,
        value,
        max_age=max_age(settings),
        path=COOKIE_PATH,
        secure=True,
        httponly=True,
        samesite="lax",
    )


def clear_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE_NAME, path=COOKIE_PATH, secure=True, httponly=True, samesite="lax")
