"""The API docs at ``/docs``: Swagger UI 5 served from the installed ``swagger-ui-bundle-v2`` package
(module ``swagger_ui_bundle``; nothing from a CDN, no copy of it in this repository), started by our
own script file (``static/docs-init.js``) so the page keeps the dashboard's Content-Security-Policy
(no inline script, no other origin).

FastAPI's own ``/docs`` and ``/redoc`` load their scripts from a CDN and start them with an inline
script; the app is created with both off (``docs_url=None, redoc_url=None``) and ``install`` adds this
page instead. Only the files the page uses are served.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse
from swagger_ui_bundle import swagger_ui_path

from assay.api.security_headers import SECURITY_HEADERS
from assay.scoring.errors import NotFound

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"
_STATIC = Path(__file__).resolve().parent / "static"
# Asset name -> file. Everything else in the package (its demo index.html, which loads the petstore
# example from another site, source maps, templates) stays unserved.
ASSETS = {
    "swagger-ui.css": Path(swagger_ui_path) / "swagger-ui.css",
    "swagger-ui-bundle.js": Path(swagger_ui_path) / "swagger-ui-bundle.js",
    "favicon-32x32.png": Path(swagger_ui_path) / "favicon-32x32.png",
    "init.js": _STATIC / "docs-init.js",
}

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} – API docs</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" type="image/png" href="{assets}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{openapi_url}"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{assets}/init.js"></script>
</body>
</html>
"""


def install(app: Any) -> None:
    """Serve the docs page and its assets on ``app`` (created with ``docs_url=None``)."""
    router = APIRouter(include_in_schema=False)
    page = _PAGE.format(
        title=escape(app.title), assets=ASSETS_PATH, openapi_url=escape(app.openapi_url or "/openapi.json")
    )

    @router.get(DOCS_PATH)
    def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=SECURITY_HEADERS)

    @router.get(ASSETS_PATH + "/{name}")
    def asset(name: str) -> FileResponse:
        path = ASSETS.get(name)
        if path is None:
            raise NotFound(f"no docs asset named {name!r}")
        return FileResponse(path, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "max-age=3600"})

    app.include_router(router)
