"""Prometheus ``/metrics``: the API's and every worker's counts (multiprocess mode), plus queue depth
and the judge breaker read live from Redis. See ``assay.observability``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from assay import observability
from assay.api.auth import require_principal
from assay.api.json_body import StrictJsonRoute
from assay.scoring.judge.wiring import build_breaker
from assay.scoring.store.db import transaction
from assay.scoring.trust import review
from assay.settings import get_settings

router = APIRouter(tags=["metrics"], route_class=StrictJsonRoute)

METRICS_DOC = """Prometheus text format. Items scored / failed per suite, judge request latency, retries, repairs,
breaker rejections and state, rate-governor waits, tokens and cost, queue depth per queue, open
review queue entries per suite (`assay_review_queue_open`), online scores' rolling windows
(`assay_online_*`, per suite and window, the busiest slices by name). With
`PROMETHEUS_MULTIPROC_DIR` set for the API and the workers, the counts of every process of the host
are added up here. Needs the same credentials as the API (`Authorization: Bearer <API key>` in the
Prometheus scrape config) unless `ASSAY_METRICS_PUBLIC=true`."""


def _online_gauges() -> bytes:
    """The online windows' gauges (assay.scoring.online.gauges), read from the store."""
    from assay.scoring.online import gauges
    from assay.scoring.store.models import utcnow

    with transaction() as session:
        return gauges.render(session, utcnow(), get_settings().online_max_slice_labels)


def _review_open() -> dict[str, int]:
    """Open review queue entries per suite; every suite not deleted is named, 0 when none is open."""
    with transaction() as session:
        return review.open_counts(session, every_suite=True)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description=METRICS_DOC,
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(request: Request) -> Response:
    settings = get_settings()
    if not getattr(settings, "metrics_public", False):
        await require_principal(request)
    from starlette.concurrency import run_in_threadpool

    # Built inside the scrape so that a breaker store that cannot be reached shows as a source down.
    body, content_type = await run_in_threadpool(
        observability.render, settings, lambda: build_breaker(settings).status(), _review_open
    )
    return Response(body + await run_in_threadpool(_online_gauges), media_type=content_type)
