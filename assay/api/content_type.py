"""Which body formats a route takes, checked before it reads the body.

A browser can send ``text/plain``, ``application/x-www-form-urlencoded`` and ``multipart/form-data``
to any site without asking it first (no CORS preflight): a route that reads JSON from a body of any
declared type would take such a request. Declaring the types closes that door for every client,
beside the CSRF check (``assay.api.csrf``) that browser identities get. A request that declares no
type at all is left to the route (the body's own format decides).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from assay.scoring.errors import AssayError


class UnsupportedMediaType(AssayError):
    status_code = 415
    code = "unsupported_media_type"


def require_content_type(*accepted: str) -> Callable[[Request], None]:
    """A dependency refusing (415) a body whose ``Content-Type`` is not one of ``accepted``."""

    def check(request: Request) -> None:
        declared = request.headers.get("content-type")
        if declared is None:
            return
        media_type = declared.split(";", 1)[0].strip().lower()
        if media_type not in accepted:
            raise UnsupportedMediaType(
                f"Content-Type {media_type or '(empty)'} is not accepted here; send one of: {', '.join(accepted)}",
                accepted=list(accepted),
            )

    return check
