"""The operator dashboard: server-rendered pages (Jinja2) with a little vanilla JS, served by the API.

``install(app)`` adds the pages under ``/dashboard`` and the assets under ``/dashboard/static`` (from
``assay/api/static``: nothing is loaded from a CDN). Sign-in sessions (the cookie) live in
:mod:`assay.api.signin_sessions`, beside the authentication that reads them.
"""

from __future__ import annotations

from typing import Any

STATIC_PATH = "/dashboard/static"


def install(app: Any) -> None:
    """Add the dashboard's routes, its static assets and its sign-in redirect to a FastAPI app."""
    from pathlib import Path

    from fastapi.staticfiles import StaticFiles

    from assay.api.dashboard.agreement_pages import router as agreement_router
    from assay.api.dashboard.compare_pages import router as compare_router
    from assay.api.dashboard.jury_pages import router as jury_router
    from assay.api.dashboard.online_pages import router as online_router
    from assay.api.dashboard.pairwise_pages import router as pairwise_router
    from assay.api.dashboard.review_pages import router as review_router
    from assay.api.dashboard.routes import SignInRequired, root_router, router, sign_in_redirect

    if getattr(app.state, "dashboard_installed", False):
        return
    app.include_router(router)
    app.include_router(agreement_router)
    app.include_router(jury_router)
    app.include_router(compare_router)
    app.include_router(pairwise_router)
    app.include_router(review_router)
    app.include_router(online_router)
    app.include_router(root_router)
    static = Path(__file__).resolve().parent.parent / "static"
    app.mount(STATIC_PATH, StaticFiles(directory=static), name="dashboard-static")
    app.add_exception_handler(SignInRequired, sign_in_redirect)
    app.state.dashboard_installed = True
