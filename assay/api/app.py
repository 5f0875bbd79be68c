"""The FastAPI app: thin routes over the scoring services."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from assay.api.body_limit import install_body_limits
from assay.api.dashboard import install as install_dashboard
from assay.api.docs import install as install_docs
from assay.api.errors import install_error_handlers
from assay.api.routes import (
    batches,
    criteria,
    datasets,
    health,
    items,
    judge,
    metrics,
    reports,
    rescore,
    review,
    score_query,
    sessions,
    suites,
)
from assay.api.routes import calibration as calibration_routes
from assay.api.routes import pairwise as pairwise_routes
from assay.api.routes import compare as compare_routes
from assay.api.routes import juries as jury_routes
from assay.api.routes import labels as label_routes
from assay.api.routes import online as online_routes
from assay.api.routes import otlp as otlp_routes
from assay.api.security import install_security

# Imported for their hooks: a suite query's carried-over score or a cancel can finalize scores here too.
from assay.scoring import features  # noqa: F401
from assay.scoring.store.db import transaction
from assay.scoring.suites.criteria import register_all_suites
from assay.settings import get_settings

log = logging.getLogger(__name__)

DESCRIPTION = """Assay scores LLM outputs (generated KQL, agent sessions, generated pandas code) with
deterministic metrics and an LLM judge. Every score is stamped with the SHA-256 criteria hash of the
suite that produced it. Authenticate with `Authorization: Bearer <API key>`; behind a trusted proxy
(oauth2-proxy) the `X-Forwarded-User` header identifies the user. A browser's request that changes
something (the dashboard's cookie, or the proxy's user) needs the page's `X-CSRF-Token` header or a
same-origin `Origin` (403 otherwise); too many wrong keys from one client get 429 with `Retry-After`.
Every request body has a size limit (the route's own, else `ASSAY_MAX_BODY_BYTES`): over it, 413
with the limit and its setting in `details`."""


def _register_suites() -> None:
    with transaction() as session:
        hashes = register_all_suites(session, get_settings().config_dir)
    for name, criteria_hash in hashes.items():
        log.info("suite %s: current criteria %s", name, criteria_hash)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await run_in_threadpool(_register_suites)
    yield


def create_app() -> FastAPI:
    # FastAPI's own /docs and /redoc load scripts from a CDN: install_docs serves /docs from the
    # installed swagger-ui-bundle package instead.
    app = FastAPI(
        title="Assay", version="0.1.0", description=DESCRIPTION, lifespan=lifespan, docs_url=None, redoc_url=None
    )
    install_error_handlers(app)
    install_security(app)
    app.include_router(health.router)
    app.include_router(batches.router)
    app.include_router(criteria.router)  # before items: its /criteria/{hash} would take /criteria/diff
    app.include_router(items.router)
    app.include_router(datasets.router)
    app.include_router(judge.router)
    app.include_router(score_query.router)
    app.include_router(sessions.router)
    app.include_router(reports.router)
    app.include_router(rescore.router)
    app.include_router(metrics.router)
    app.include_router(suites.router)
    app.include_router(calibration_routes.router)
    app.include_router(pairwise_routes.router)
    app.include_router(compare_routes.router)
    app.include_router(review.router)
    app.include_router(label_routes.router)
    app.include_router(jury_routes.router)
    app.include_router(otlp_routes.router)
    app.include_router(online_routes.router)
    install_dashboard(app)
    install_docs(app)
    install_body_limits(app)  # last, so the outermost middleware: it counts a body before anything reads it
    return app
