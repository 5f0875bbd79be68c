"""Every JSON request body the API reads goes through :mod:`assay.scoring.intake.strict_json`.

FastAPI parses a JSON body with Python's ``json.loads``, which takes ``NaN`` and ``Infinity`` (and a
float past the range, as infinity): the value would then be stored as null, or refused somewhere
deep. :class:`StrictJsonRoute` parses the body first with the API's one JSON reader; a body it
refuses is a 422 naming the reason, and FastAPI validates the value it produced. Every router of the
API is created with ``route_class=StrictJsonRoute`` (a test walks the app's routes to keep it so).
Batch uploads stream their body through the same reader line by line (``assay.scoring.intake.ingest``).
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import params
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from assay.scoring.errors import InvalidInput
from assay.scoring.intake import strict_json


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI would read a body of this type as JSON (``application/json`` or ``…+json``)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class StrictJsonRoute(APIRoute):
    """A route whose JSON body is parsed by the API's one JSON reader (see the module)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None or isinstance(self.body_field.field_info, params.Form):
            return handler  # no JSON body to read (a form, or a handler that reads the stream itself)

        async def strict(request: Request) -> Response:
            if is_json(request.headers.get("content-type")):
                body = await request.body()
                if body:
                    try:
                        value = strict_json.loads(body)
                    except strict_json.JsonRejected as exc:
                        raise InvalidInput(exc.message, location="body") from None
                    # Starlette keeps the parsed body here; FastAPI's request.json() returns it.
                    request._json = value
            return await handler(request)

        return strict
