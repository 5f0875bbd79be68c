"""Dashboard sign-in: a signed, HTTP-only, ``Secure``, ``SameSite=Lax`` session cookie.

Behind a trusted proxy (oauth2-proxy) the user is the proxy's ``X-Forwarded-User`` and no cookie is
needed. Otherwise the sign-in page takes an API key; when it matches one of ``ASSAY_API_KEYS`` the
dashboard sets ``assay_session``, whose value is::

    base64url(JSON {"u": user, "k": key fingerprint, "exp": epoch seconds, "c": CSRF token})
    "." base64url(HMAC-SHA256(secret, that first part))

The key itself is never stored in the cookie, only a 16-hex-digit SHA-256 fingerprint of it: removing
the key from ``ASSAY_API_KEYS`` signs out every session opened with it. The secret is
``ASSAY_SESSION_SECRET`` when set, else derived from the configured API keys (so rotating the keys
also signs everyone out, and every API process agrees on it without more configuration).

The JSON API accepts the cookie too (``cookie_user``, called from ``assay.api.auth``), so the
dashboard's own fetches need no key in the page. A request that changes something (any method but
GET, HEAD, OPTIONS) authenticated by the cookie must also carry the session's CSRF token in
``X-CSRF-Token`` (the pages put it in ``<meta name="csrf-token">``): ``SameSite=Lax`` already keeps
the cookie off cross-site POSTs; the token is the second lock. (Lax rather than Strict so that a link
to a dashboard page from a chat or a ticket opens the page instead of the sign-in form.)

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
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from assay.scoring.errors import Unauthorized

COOKIE_NAME = "assay_session"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_MAX_AGE_SECONDS = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
COOKIE_PATH = "/"
_DERIVE_LABEL = b"assay-dashboard-session-v1"


@dataclass(frozen=True)
class SessionData:
    user: str
    key_fingerprint: str
    expires_at: int
    csrf: str


def key_fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _api_keys(settings: Any) -> list[str]:
    return [k.get_secret_value() for k in getattr(settings, "api_keys", []) or [] if k.get_secret_value()]


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


def matching_key(settings: Any, offered: str) -> str | None:
    """The configured API key equal to ``offered`` (constant-time compare), or None."""
    found = None
    for key in _api_keys(settings):
        if hmac.compare_digest(offered.encode(), key.encode()):
            found = key
    return found


def issue(settings: Any, user: str, key: str, *, now: float | None = None) -> tuple[str, SessionData]:
    """A signed cookie value for ``user``, opened with API key ``key``."""
    secret = _secret(settings)
    if secret is None:
        raise Unauthorized("no API keys are configured (ASSAY_API_KEYS): nobody can sign in")
    data = SessionData(
        user=user[:255],
        key_fingerprint=key_fingerprint(key),
        expires_at=int((now if now is not None else time.time()) + max_age(settings)),
        csrf=secrets.token_urlsafe(24),
    )
    body = _b64(json.dumps({"u": data.user, "k": data.key_fingerprint, "exp": data.expires_at, "c": data.csrf}).encode())
    return f"{body}.{_sign(secret, body)}", data


def verify(settings: Any, value: str | None, *, now: float | None = None) -> SessionData | None:
    """The session in a cookie value, or None when it is missing, forged, expired or its key was removed."""
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
        data = SessionData(user=str(raw["u"]), key_fingerprint=str(raw["k"]), expires_at=int(raw["exp"]), csrf=str(raw["c"]))
    except (ValueError, KeyError, TypeError):
        return None
    if data.expires_at <= (now if now is not None else time.time()):
        return None
    if data.key_fingerprint not in {key_fingerprint(k) for k in _api_keys(settings)}:
        return None
    return data


def read(request: Request, settings: Any) -> SessionData | None:
    return verify(settings, request.cookies.get(COOKIE_NAME))


def cookie_user(request: Request, settings: Any) -> str | None:
    """The signed-in user for the JSON API, or None without a valid session cookie.

    Raises ``Unauthorized`` for a request that changes something with the cookie but without the
    session's CSRF token in ``X-CSRF-Token``.
    """
    data = read(request, settings)
    if data is None:
        return None
    if request.method.upper() not in SAFE_METHODS:
        offered = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(offered.encode(), data.csrf.encode()):
            raise Unauthorized(f"a request made with the dashboard session cookie needs the {CSRF_HEADER} header")
    return data.user


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
