"""Authentication: bearer API keys, or a trusted proxy's ``X-Forwarded-User`` (oauth2-proxy).

The forwarded headers are honoured only from a configured trusted proxy address; from anyone else
they are ignored, so a client cannot name itself.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from assay.api.dashboard.session import cookie_user
from assay.scoring.errors import Unauthorized
from assay.settings import Settings, get_settings

bearer = HTTPBearer(auto_error=False, description="An API key from ASSAY_API_KEYS.")


@dataclass(frozen=True)
class Principal:
    name: str
    via: str  # "api_key", "proxy" or "session" (the dashboard's signed cookie)


def is_trusted_proxy(request: Request, settings: Settings) -> bool:
    host = request.client.host if request.client else None
    if not host or not settings.trusted_proxies:
        return False
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(addr in ipaddress.ip_network(net, strict=False) for net in settings.trusted_proxies)


def forwarded_user(request: Request, settings: Settings) -> str | None:
    """X-Forwarded-User, else X-Forwarded-Email, from a trusted proxy only."""
    if not is_trusted_proxy(request, settings):
        return None
    for header in ("x-forwarded-user", "x-forwarded-email"):
        value = request.headers.get(header, "").strip()
        if value:
            return value[:255]
    return None


def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None, settings: Settings) -> Principal:
    user = forwarded_user(request, settings)
    if user is not None:
        return Principal(user, "proxy")
    if credentials is not None and credentials.scheme.lower() == "bearer":
        offered = credentials.credentials.encode()
        for key in settings.api_keys:
            if hmac.compare_digest(offered, key.get_secret_value().encode()):
                return Principal("api-client", "api_key")
    # The dashboard's session cookie; a request that changes something must also send X-CSRF-Token.
    user = cookie_user(request, settings)
    if user is not None:
        return Principal(user, "session")
    raise Unauthorized("a valid bearer API key is required (Authorization: Bearer <key>)")


async def require_principal(request: Request) -> Principal:
    credentials = await bearer(request)
    return authenticate(request, credentials, get_settings())
