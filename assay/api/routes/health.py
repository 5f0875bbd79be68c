"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from assay.api.json_body import StrictJsonRoute
from assay.api.schemas import Health
from assay.scoring.store.db import transaction
from assay.settings import get_settings

router = APIRouter(tags=["health"], route_class=StrictJsonRoute)


@router.get("/healthz", response_model=Health, summary="The process is up")
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, summary="Postgres and Redis are reachable", responses={503: {"model": Health}})
def readyz() -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with transaction() as session:
            session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # report, never raise: this endpoint exists to say what is down
        checks["database"] = f"unreachable: {type(exc).__name__}"
    try:
        import redis

        redis.Redis.from_url(get_settings().broker_url, socket_connect_timeout=2, socket_timeout=2).ping()
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"unreachable: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(Health(status="ok" if ready else "unavailable", checks=checks).model_dump(), status_code=200 if ready else 503)
