"""The judge's circuit breaker state, per model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.scoring.judge.wiring import build_breaker
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/judge", tags=["judge"], route_class=StrictJsonRoute)


class BreakerState(BaseModel):
    model: str
    state: str = Field(..., description="closed, open or half_open")
    failures: int = Field(..., description="Consecutive transient failures counted")
    opened_at: str | None
    next_probe_at: str | None = Field(None, description="When one probe call will be let through")


class JudgeStatus(BaseModel):
    shared: bool = Field(..., description="True when the breaker state is shared through Redis")
    breakers: list[BreakerState] = Field(..., description="Models that have been called; others are closed")


@router.get("/status", response_model=JudgeStatus, summary="Circuit breaker state per judge model")
def judge_status(_: Annotated[Principal, Depends(require_principal)]) -> JudgeStatus:
    from assay.scoring.reports.views import iso

    settings = get_settings()
    rows = build_breaker(settings).status()
    return JudgeStatus(
        shared=bool(settings.redis_url),
        breakers=[
            BreakerState(
                model=r["model"],
                state=r["state"],
                failures=r["failures"],
                opened_at=iso(r["opened_at"]),
                next_probe_at=iso(r["next_probe_at"]),
            )
            for r in rows
        ],
    )
