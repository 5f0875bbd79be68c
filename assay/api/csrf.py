"""CSRF defence for every route: a browser's request that changes something must prove it comes from
this site's own pages.

A request carries a *browser identity* when it has a session cookie that verifies (the dashboard's
``assay_session``) or comes through the trusted proxy with a forwarded user (oauth2-proxy signs the
browser in with its own cookie). For such a request, any method but GET, HEAD and OPTIONS — on every
route, whatever its body (JSON, JSONL, multipart file uploads, forms) — must carry either

- ``X-CSRF-Token`` with the token of that identity (the pages put it in
  ``<meta name="csrf-token">`` and ``static/dashboard.js`` sends it), or
- an ``Origin`` header naming this site (what browsers send with a same-origin form or fetch).

Otherwise it is refused with 403 before any route runs. The sign-in form (``POST /dashboard/sign-in``)
is checked too, though it comes before any identity: it makes one, and another site's page must not
sign a visitor's browser in under the attacker's key (login CSRF). There is no token before signing
in, so its ``Origin`` must name this site. A request with a valid bearer key is not
affected, cookie or not: a browser never adds ``Authorization: Bearer`` by itself, and another site
cannot make it send one (that needs a CORS preflight, which this API never grants), so the key is
what the request acts with.

The token of a session cookie is an HMAC of the session's id (``assay.api.signin_sessions``). A
proxy user has no session of ours: their token is ``<expiry>.<HMAC(user, expiry)>``, signed with the
same secret, valid for ``ASSAY_SESSION_MAX_AGE_SECONDS`` and only for the user it was made for; each
page gets a fresh one.

"This site" is the ``Host`` the request was sent to (with the request's scheme), and, from the
trusted proxy only, its ``X-Forwarded-Host`` / ``X-Forwarded-Proto``.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from assay.api.auth import forwarded_user, is_trusted_proxy
from assay.api import signin_sessions as cookie
from assay.settings import Settings, get_settings

CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PROXY_LABEL = b"assay-proxy-csrf-v1"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SIGN_IN_REFUSAL = (
    "signing in needs an Origin header naming this site, which this site's sign-in form sends: a sign-in "
    "posted from another site's page is refused"
)


def _proxy_signature(secret: bytes, user: str, expires_at: int) -> str:
    message = _PROXY_LABEL + b"\0" + user.encode() + b"\0" + str(expires_at).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def proxy_token(settings: Settings, user: str, *, now: float | None = None) -> str:
    """A CSRF token for the proxy user ``user`` ("" when nothing is configured to sign it with)."""
    secret = cookie.signing_secret(settings)
    if secret is None:
        return ""
    expires_at = int((now if now is not None else time.time()) + cookie.max_age(settings))
    return f"{expires_at}.{_proxy_signature(secret, user, expires_at)}"


def proxy_token_valid(settings: Settings, user: str, token: str, *, now: float | None = None) -> bool:
    secret = cookie.signing_secret(settings)
    expiry, _, signature = token.partition(".")
    if secret is None or not expiry.isdigit() or len(expiry) > 12:
        return False
    if int(expiry) <= (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(signature.encode(), _proxy_signature(secret, user, int(expiry)).encode())


def _origin_tuple(scheme: str, netloc: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return scheme.lower(), parts.hostname.lower(), port


def same_origin(request: Request, settings: Settings) -> bool:
    """Whether ``Origin`` names the site the request was sent to."""
    origin = request.headers.get("origin", "")
    scheme, sep, netloc = origin.partition("://")
    if not sep:
        return False  # missing, or "null" (a sandboxed frame, a redirect across sites)
    offered = _origin_tuple(scheme, netloc)
    schemes = {request.url.scheme}
    hosts = {request.headers.get("host", "")}
    if is_trusted_proxy(request, settings):
        schemes.add(request.headers.get("x-forwarded-proto", "").split(",")[0].strip())
        hosts.add(request.headers.get("x-forwarded-host", "").split(",")[0].strip())
    return offered is not None and any(
        offered == _origin_tuple(s, h) for s in schemes if s in _DEFAULT_PORTS for h in hosts if h
    )


def _token_accepted(request: Request, settings: Settings, session: cookie.SessionData | None, user: str | None) -> bool:
    offered = request.headers.get(CSRF_HEADER, "")
    if not offered:
        return False
    if session is not None and hmac.compare_digest(offered.encode(), session.csrf.encode()):
        return True
    return user is not None and proxy_token_valid(settings, user, offered)


def csrf_refusal(request: Request, settings: Settings) -> str | None:
    """Why this request may not go on (None: it may)."""
    if request.method.upper() in SAFE_METHODS:
        return None
    scheme, _, offered = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and offered.strip() and cookie.matching_key(settings, offered.strip()) is not None:
        return None  # a key holder: a browser never adds a bearer key by itself, nor lets another site add one
    if request.url.path == cookie.SIGN_IN_PATH:
        return None if same_origin(request, settings) else _SIGN_IN_REFUSAL
    session = cookie.signed(request, settings)
    user = forwarded_user(request, settings)
    if session is None and user is None:
        return None
    if same_origin(request, settings) or _token_accepted(request, settings, session, user):
        return None
    return (
        f"a browser request that changes something needs this site's {CSRF_HEADER} header (from the page's "
        '<meta name="csrf-token">) or a same-origin Origin header'
    )


class CsrfMiddleware:
    """Refuses (403) a request that changes something for a browser identity without the token or a
    same-origin ``Origin``, before any route runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"].upper() not in SAFE_METHODS:
            reason = csrf_refusal(Request(scope), get_settings())
            if reason is not None:
                refusal = JSONResponse({"error": "csrf_check_failed", "message": reason}, status_code=403)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
