"""Authentication: bearer API keys, a trusted proxy's ``X-Forwarded-User`` (oauth2-proxy), or the
dashboard's session cookie.

The forwarded headers are honoured only from a configured trusted proxy, judged by the socket peer
the server saw: from anyone else they are ignored, so a client cannot name itself. ``assay api`` runs
uvicorn with its proxy-header rewriting off, so the peer the app sees is the real one. Under a server
that rewrites the client address from ``X-Forwarded-For`` anyway, the rewritten address is one of the
header's own hops; a "proxy" named in its own ``X-Forwarded-For`` is therefore not trusted (a real
proxy appends the address of its peer, never its own).

Wrong keys are counted per client by ``assay.api.throttle``.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from assay.api.signin_sessions import cookie_user, matching_key
from assay.api.throttle import get_throttle
from assay.scoring import principals
from assay.scoring.errors import Unauthorized
from assay.settings import ApiKey, Settings, get_settings

log = logging.getLogger(__name__)

bearer = HTTPBearer(auto_error=False, description="An API key from ASSAY_API_KEYS.")


@dataclass(frozen=True)
class Principal:
    name: str  # the proxy's user, or the API key's name (``name:key`` in ASSAY_API_KEYS)
    via: str  # "api_key", "proxy" or "session" (the dashboard's signed cookie, opened with a key)

    @property
    def id(self) -> str:
        """Who this is, typed by how it signed in (``key:NAME`` or ``proxy:NAME``): what the store records."""
        return principals.signed_in(self.via, self.name)

    def is_operator(self, settings: Settings) -> bool:
        """Whether this is the holder of a key named in ``ASSAY_OPERATOR_KEYS`` (never a proxy user)."""
        return principals.KIND_OF_SIGN_IN[self.via] == principals.KEY and self.name in settings.operator_keys


def _in_networks(host: str, networks: list[str]) -> bool:
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(addr in ipaddress.ip_network(net, strict=False) for net in networks)


def forwarded_hops(request: Request) -> list[str]:
    """The addresses in ``X-Forwarded-For`` (every such header), leftmost first."""
    values = request.headers.getlist("x-forwarded-for")
    return [hop.strip() for value in values for hop in value.split(",") if hop.strip()]


_warned_rewritten = False


def is_trusted_proxy(request: Request, settings: Settings) -> bool:
    """Whether the socket peer is one of ``ASSAY_TRUSTED_PROXIES`` (and was not rewritten from a header)."""
    global _warned_rewritten
    host = request.client.host if request.client else None
    if not host or not settings.trusted_proxies or not _in_networks(host, settings.trusted_proxies):
        return False
    if host in forwarded_hops(request):
        if not _warned_rewritten:
            _warned_rewritten = True
            log.warning(
                "the server rewrote the client address from X-Forwarded-For (%s came in that header): the "
                "forwarded identity is ignored. Start the API with `assay api`, or turn the server's proxy "
                "headers off (uvicorn --no-proxy-headers)",
                host,
            )
        return False
    return True


def client_address(request: Request, settings: Settings) -> str:
    """The client: the socket peer, or, when the peer is a trusted proxy, the nearest address in its
    ``X-Forwarded-For`` that is not a trusted proxy (the hops further left are the client's to write)."""
    peer = request.client.host if request.client else ""
    if is_trusted_proxy(request, settings):
        for hop in reversed(forwarded_hops(request)):
            if not _in_networks(hop, settings.trusted_proxies):
                return hop
    return peer


def forwarded_user(request: Request, settings: Settings) -> str | None:
    """X-Forwarded-User, else X-Forwarded-Email, from a trusted proxy only."""
    if not is_trusted_proxy(request, settings):
        return None
    for header in ("x-forwarded-user", "x-forwarded-email"):
        value = request.headers.get(header, "").strip()
        if value:
            return value[: principals.PROXY_NAME_MAX]
    return None


def check_key(request: Request, offered: str, settings: Settings) -> ApiKey | None:
    """The configured API key equal to ``offered``, with its name, or None (counted as the client's failure).

    Raises ``TooManyFailures`` (429) while the client has used up its failures, whatever it offers."""
    throttle = get_throttle(settings)
    client = client_address(request, settings)
    throttle.check(client)
    key = matching_key(settings, offered)
    if key is None:
        throttle.failed(client)
    return key


def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None, settings: Settings) -> Principal:
    """Who is asking (the store is read for a session cookie: call from a worker thread)."""
    user = forwarded_user(request, settings)
    if user is not None:
        return Principal(user, "proxy")
    if credentials is not None and credentials.scheme.lower() == "bearer":
        key = check_key(request, credentials.credentials, settings)
        if key is not None:
            return Principal(key.name, "api_key")
        raise Unauthorized("that API key is not one of this deployment's keys (Authorization: Bearer <key>)")
    # The dashboard's session cookie (a request that changes something is checked by assay.api.csrf).
    user = cookie_user(request, settings)
    if user is not None:
        return Principal(user, "session")
    raise Unauthorized("a valid bearer API key is required (Authorization: Bearer <key>)")


async def require_principal(request: Request) -> Principal:
    credentials = await bearer(request)
    return await run_in_threadpool(authenticate, request, credentials, get_settings())
