"""Batch endpoints: thin adapters over ``assay.scoring.intake.batches`` and ``assay.scoring.intake.ingest``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from assay.api.auth import Principal, require_principal
from assay.api.body_limit import body_limit
from assay.api.content_type import require_content_type
from assay.api.json_body import StrictJsonRoute
from assay.api.params import Offset
from assay.api.publish import publish_components, start_planner
from assay.api.schemas import (
    BatchAccepted,
    BatchList,
    BatchOut,
    ResultsPage,
    ScoreOut,
    SlicedSummaryOut,
)
from assay.scoring import slices
from assay.scoring.errors import BadRequest
from assay.scoring.intake import batches as svc
from assay.scoring.intake.idempotency import IdempotencyKey
from assay.scoring.intake.ingest import BatchWriter, IngestLimits, IngestResult
from assay.scoring.kinds import get_kind
from assay.scoring.pipeline.summaries import sliced_summary
from assay.scoring.reports import exports
from assay.scoring.reports.views import batch_view, live_lines, score_view
from assay.scoring.store.db import new_session, transaction
from assay.scoring.store.models import FINISHED_SCORE_STATUSES
from assay.scoring.suites.criteria import current_suite, load_criteria
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/batches", tags=["batches"], route_class=StrictJsonRoute)
FEED_BYTES = 1 << 20

UPLOAD_DOC = """Upload items for a suite as **JSONL** (one JSON object per line) or a **JSON array**, in the raw
request body (`Content-Type: application/x-ndjson` or `application/json`; any other declared type is
refused with 415). The body is streamed into the store in one transaction: by default any bad line
rejects the whole upload (422, listing the bad lines with their line numbers, nothing written); with
`partial=true` the good lines are accepted and the bad ones reported. A body over the configured limit
gets 413. A JSON array is streamed like JSONL (its items are numbered by index). Ids are unique within
an upload: a line repeating an earlier line's `id` is a bad line. For a `generic` suite with a `fields`
mapping, lines are the objects as you have them: the mapping (paths like `gold.text` or `choices[0].text`)
picks the item's fields and leaves the other keys out, and a line without a mapped `input` or `output` is
a bad line naming the path. Returns 202 with the batch id at
once; scoring runs in the workers. A retry with the same `Idempotency-Key` (the key is the caller's
own), suite, parameters and body returns the first batch; the key with anything else is a 422, and
while the first upload is still streaming a retry gets 409."""


UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-ndjson": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }
}


@router.post(
    "",
    status_code=202,
    response_model=BatchAccepted,
    summary="Submit a batch",
    description=UPLOAD_DOC,
    openapi_extra=UPLOAD_BODY,
    dependencies=[Depends(require_content_type("application/x-ndjson", "application/json"))],
    responses={
        409: {"description": "A retry while the upload with the same Idempotency-Key is still streaming"},
        413: {"description": "Body or item count over the limit"},
        415: {"description": "A Content-Type other than application/x-ndjson or application/json"},
        422: {"description": "Bad lines (listed), or an Idempotency-Key used for a different upload"},
    },
)
@body_limit("max_upload_bytes")
async def create_batch(
    request: Request,
    response: Response,
    principal: Annotated[Principal, Depends(require_principal)],
    suite: Annotated[
        str,
        Query(
            description="Suite name (a file in config/suites/, or a suite registered through POST /api/v1/suites).",
            min_length=1,
            max_length=100,
        ),
    ],
    partial: Annotated[bool, Query(description="Accept the good lines when some are bad.")] = False,
    budget_usd: Annotated[
        float | None,
        Query(
            gt=0,
            le=1e9,
            description="Judge spend limit in US dollars: judge calls stop when the batch's spend reaches it "
            "(the batch ends budget_exhausted, finished scores kept, the rest resumable). The response "
            "carries the pre-flight estimate.",
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=255,
            description="Names this upload for retries: the same key (from the same principal) with the same "
            "suite, parameters and body returns the first batch; with anything else, 422; while the first "
            "upload is still streaming, 409.",
        ),
    ] = None,
) -> BatchAccepted:
    settings = get_settings()
    idempotency = None
    if idempotency_key:
        request_asked = {"route": "POST /api/v1/batches", "suite": suite, "partial": partial, "budget_usd": budget_usd}
        idempotency = IdempotencyKey(idempotency_key, scope=principal.id, request=request_asked)
    limits = IngestLimits(
        max_items=settings.max_items_per_batch,
        max_item_bytes=settings.max_item_bytes,
        max_body_bytes=settings.max_upload_bytes,
        max_reported_bad_lines=settings.max_reported_bad_lines,
    )
    session = new_session()
    writer: BatchWriter | None = None
    estimate: dict[str, Any] | None = None
    try:
        await run_in_threadpool(session.begin)

        def start() -> BatchWriter:
            record = current_suite(session, suite)
            writer = BatchWriter(
                session,
                suite=record,
                kind=get_kind(record.kind),
                created_by=principal.id,
                limits=limits,
                partial=partial,
                idempotency=idempotency,
                budget_usd=budget_usd,
            )
            writer.begin()
            return writer

        writer = await run_in_threadpool(start)
        # A retry's body is read too (only hashed): whether it is the same upload is known at its end.
        pending: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            pending.append(chunk)
            size += len(chunk)
            if size >= FEED_BYTES:
                await run_in_threadpool(writer.feed, b"".join(pending))
                pending, size = [], 0
        await run_in_threadpool(writer.feed, b"".join(pending))
        result: IngestResult = await run_in_threadpool(writer.finish)
        if not result.created:
            response.headers["Idempotent-Replay"] = "true"
        elif budget_usd is not None:
            estimate = await run_in_threadpool(_preflight, session, result)
        await run_in_threadpool(session.commit)
    except BaseException:
        if writer is not None:
            await run_in_threadpool(writer.abort)
        await run_in_threadpool(session.rollback)
        raise
    finally:
        await run_in_threadpool(session.close)
    if result.created:
        start_planner(result.batch.id)
    batch_id = str(result.batch.id)
    response.headers["Location"] = f"/api/v1/batches/{batch_id}"
    return BatchAccepted(
        batch_id=batch_id,
        status=result.batch.status,
        suite=result.batch.suite_name,
        criteria_hash=result.batch.criteria_hash,
        accepted=result.accepted,
        rejected=result.bad_line_count,
        bad_lines=[b.to_dict() for b in result.bad_lines],
        replayed=not result.created,
        budget_usd=result.batch.budget_usd,
        estimate=estimate,
    )


def _preflight(session: Any, result: IngestResult) -> dict[str, Any]:
    from sqlalchemy import select

    from assay.scoring.rescoring.rescore import estimate
    from assay.scoring.store.models import Item, Score
    from assay.scoring.suites.loader import load_model_catalog

    batch = result.batch
    items = Item.id.in_(select(Score.item_id).where(Score.batch_id == batch.id))
    catalog = load_model_catalog(get_settings().config_dir)
    return estimate(session, batch.criteria_hash, batch.suite_name, items, catalog, "realtime").to_dict()


@router.get("", response_model=BatchList, summary="List batches, newest first")
def list_batches(
    _: Annotated[Principal, Depends(require_principal)],
    suite: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> BatchList:
    with transaction() as session:
        rows = svc.list_batches(session, limit=limit, offset=offset, suite=suite)
        return BatchList(batches=[BatchOut(**batch_view(b, svc.progress(session, b))) for b in rows])


@router.get("/{batch_id}", response_model=BatchOut, summary="A batch with its progress and summary")
def get_batch(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> BatchOut:
    with transaction() as session:
        batch = svc.get_batch(session, batch_id)
        return BatchOut(**batch_view(batch, svc.progress(session, batch)))


SLICES_DOC = f"""The batch's summary per slice of a metadata key: `by=metadata.KEY` splits the batch's machine
scores by the value of `KEY` in each item's `metadata` (strings as they are, numbers and booleans as
their JSON text; items without it form the `missing` slice). Each slice has its items, counts by
outcome, pass rate, mean total and per-component means. The {slices.MAX_SLICES} largest values are kept apart
and the rest grouped in one `other` slice (its note says how many values); a slice with fewer than
{slices.MIN_SLICE_ITEMS} scored items is flagged `small: true` with a note. A key holding an object or an
array is refused with 400."""


@router.get(
    "/{batch_id}/slices",
    response_model=SlicedSummaryOut,
    summary="A batch's summary per slice of a metadata key (by=metadata.KEY)",
    description=SLICES_DOC,
    responses={400: {"description": "by is not metadata.KEY, or the key holds objects or arrays"}},
)
def batch_slices(
    batch_id: uuid.UUID,
    _: Annotated[Principal, Depends(require_principal)],
    by: Annotated[str, Query(max_length=120, description="metadata.KEY: the metadata key to slice by")],
) -> SlicedSummaryOut:
    with transaction() as session:
        svc.get_batch(session, batch_id)
        return SlicedSummaryOut(batch_id=str(batch_id), **sliced_summary(session, batch_id, by))


@router.post("/{batch_id}/cancel", response_model=BatchOut, summary="Cancel: drop queued work, keep finished scores")
def cancel_batch(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> BatchOut:
    with transaction() as session:
        batch = svc.get_batch(session, batch_id)
        svc.cancel(session, batch)
        return BatchOut(**batch_view(batch, svc.progress(session, batch)))


@router.post(
    "/{batch_id}/retry-failed",
    response_model=BatchOut,
    summary="Re-run only the failed items; components that already landed are kept (never paid twice)",
)
def retry_failed(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> BatchOut:
    with transaction() as session:
        batch = svc.get_batch(session, batch_id)
        refs = svc.retry_failed(session, batch)
        view = BatchOut(**batch_view(batch, svc.progress(session, batch)))
    publish_components(refs)
    return view


class ResumeIn(BaseModel):
    budget_usd: float | None = Field(
        None, gt=0, le=1e9, description="The new judge spend limit in US dollars (above what was spent); null: none"
    )


@router.post(
    "/{batch_id}/resume",
    response_model=BatchOut,
    summary="Resume a budget_exhausted batch under a new budget; what landed is kept (never paid twice)",
    responses={409: {"description": "The batch is not budget_exhausted"}, 400: {"description": "Budget not above the spend"}},
)
def resume(batch_id: uuid.UUID, body: ResumeIn, _: Annotated[Principal, Depends(require_principal)]) -> BatchOut:
    with transaction() as session:
        batch = svc.get_batch(session, batch_id)
        resumed = svc.resume(session, batch, body.budget_usd)
        view = BatchOut(**batch_view(batch, svc.progress(session, batch)))
    publish_components(resumed.refs)
    if resumed.needs_planner:
        start_planner(batch_id)
    return view


@router.delete("/{batch_id}", status_code=204, summary="Delete a batch with its items and scores")
def delete_batch(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> Response:
    with transaction() as session:
        svc.delete_batch(session, svc.get_batch(session, batch_id))
    return Response(status_code=204)


ResultFilter = Literal["all", "finished", "passed", "failed", "errored"]


@router.get(
    "/{batch_id}/results",
    response_model=ResultsPage,
    summary="Results, paginated; or a streamed export with format=jsonl|csv",
    responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}}}, 410: {"description": "The batch was pruned by retention"}},
)
def results(
    batch_id: uuid.UUID,
    _: Annotated[Principal, Depends(require_principal)],
    status: Annotated[
        ResultFilter, Query(description="finished / passed / failed (below threshold) / errored")
    ] = "all",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
    finished_after: Annotated[
        datetime | None,
        Query(description="Only results finished after this time, oldest first (to follow a running batch)"),
    ] = None,
    format: Annotated[Literal["json", "jsonl", "csv"], Query(description="json: a page; jsonl/csv: every result, streamed, with the human verdict (human_* columns)")] = "json",
) -> Any:
    with transaction() as session:
        batch = svc.scored_batch(session, batch_id)
        criteria = load_criteria(session, batch.criteria_hash)
        if format == "json":
            kind = get_kind(criteria.kind)
            page = svc.results_page(
                session, batch_id, status=status, limit=limit, offset=offset, finished_after=finished_after
            )
            return ResultsPage(
                batch_id=str(batch_id),
                total=page.total,
                limit=limit,
                offset=offset,
                results=[
                    ScoreOut(
                        **score_view(s, threshold=criteria.threshold),
                        live=live_lines(s, kind, criteria.threshold) if s.status in FINISHED_SCORE_STATUSES else None,
                    )
                    for s in page.rows
                ],
            )
    return StreamingResponse(
        _export(batch_id, status, format),
        media_type="application/x-ndjson" if format == "jsonl" else "text/csv",
        headers={"Content-Disposition": f'attachment; filename="batch-{batch_id}.{format}"'},
    )


def _export(batch_id: uuid.UUID, status: str, fmt: exports.ExportFormat) -> Iterator[str]:
    session = new_session()
    try:
        yield from exports.results_export(session, batch_id, status, fmt)
    finally:
        session.close()


# --- the pandas code-generation design's metrics files (pandas_codegen batches) ---------------------------


def _pandas_batch(session: Any, batch_id: uuid.UUID) -> Any:
    batch = svc.scored_batch(session, batch_id)
    if load_criteria(session, batch.criteria_hash).kind != "pandas_codegen":
        raise BadRequest(f"batch {batch_id} is not a pandas_codegen batch: it has no metrics.json")
    return batch


@router.get(
    "/{batch_id}/metrics.json",
    summary="Design 002's per-item metrics.json (pandas_codegen batches), streamed",
    responses={200: {"content": {"application/json": {}}}},
)
def metrics_json(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> StreamingResponse:
    from assay.scoring.pandas.report import stream_metrics_json

    with transaction() as session:
        _pandas_batch(session, batch_id)

    def stream() -> Iterator[str]:
        session = new_session()
        try:
            yield from stream_metrics_json(svc.iter_results(session, batch_id, status="all"))
        finally:
            session.close()

    return StreamingResponse(
        stream(),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="metrics-{batch_id}.json"'},
    )


@router.get(
    "/{batch_id}/metrics_summary.json",
    summary="Design 002's metrics_summary.json (pandas_codegen batches)",
)
def metrics_summary_json(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> dict[str, Any]:
    from assay.scoring.pandas.report import iter_entries, summarize

    with transaction() as session:
        batch = _pandas_batch(session, batch_id)
        entries = list(iter_entries(svc.iter_results(session, batch_id, status="all")))
        return {
            "batch_id": str(batch_id),
            "suite": batch.suite_name,
            "criteria_hash": batch.criteria_hash,
            **summarize(entries),
        }
