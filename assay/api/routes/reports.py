"""Batch reports (JSON, CSV, Excel): thin adapters over ``assay.scoring.reports.batch_reports``."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask

from assay.api.auth import Principal, require_principal
from assay.api.json_body import StrictJsonRoute
from assay.scoring.intake import batches as svc
from assay.scoring.reports import batch_reports as reports
from assay.scoring.store.db import new_session, transaction

router = APIRouter(prefix="/api/v1/batches", tags=["reports"], route_class=StrictJsonRoute)

REPORT_DOC = """Every result of the batch (pending ones too, as `PENDING`), one row each, with the suite kind's
report columns: for KQL suites the KQL scoring design's `Total Score`, `Score Status`, `Schema Match Score`,
`Semantic Similarity Score`, `Results Match Score`, `LLM Grading Score`, `LLM Reasoning`, then
`Prompt`, `Generated Query`, `Expected Query`, `Execution Error`; then `Position`, `External ID`,
`Item ID`, `Score ID`; then the human verdict beside the machine one: `human_reviewer`, `human_passed`,
`human_score`, `human_comment`, `human_reviewed_at` (the item's latest review in the suite),
`human_labels` and `human_majority` (pass, fail or tie over its labels). The summary counts only
machine verdicts. Written a chunk of results at a time, so memory stays flat for big batches."""


def _context(batch_id: uuid.UUID) -> reports.ReportContext:
    with transaction() as session:
        return reports.open_report(session, batch_id)


def _streamed(
    ctx: reports.ReportContext, write: Callable[[reports.ReportContext, Any], Iterator[str]]
) -> Iterator[bytes]:
    session = new_session()
    try:
        for chunk in write(ctx, svc.iter_results(session, ctx.batch_id, status="all")):
            yield chunk.encode()
    finally:
        session.close()


def _disposition(batch_id: uuid.UUID, ext: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="batch-{batch_id}-report.{ext}"'}


@router.get(
    "/{batch_id}/report.json",
    summary="The batch report as JSON (batch, summary, columns, rows), streamed",
    description=REPORT_DOC,
    responses={200: {"content": {"application/json": {}}}, 404: {"description": "No such batch"}, 410: {"description": "The batch was pruned by retention"}},
    response_class=StreamingResponse,
)
def report_json(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> StreamingResponse:
    ctx = _context(batch_id)
    return StreamingResponse(
        _streamed(ctx, reports.json_chunks), media_type=reports.MEDIA_TYPES["json"], headers=_disposition(batch_id, "json")
    )


@router.get(
    "/{batch_id}/report.csv",
    summary="The batch report as CSV, streamed",
    description=REPORT_DOC + "\n\nText a spreadsheet would run as a formula is prefixed with `'`.",
    responses={200: {"content": {"text/csv": {}}}, 404: {"description": "No such batch"}, 410: {"description": "The batch was pruned by retention"}},
    response_class=StreamingResponse,
)
def report_csv(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> StreamingResponse:
    ctx = _context(batch_id)
    return StreamingResponse(
        _streamed(ctx, reports.csv_chunks), media_type=reports.MEDIA_TYPES["csv"], headers=_disposition(batch_id, "csv")
    )


@router.get(
    "/{batch_id}/report.xlsx",
    summary="The batch report as an Excel workbook: a Summary sheet and a Results sheet",
    description=REPORT_DOC
    + "\n\nThe workbook is written in openpyxl's write-only mode to a temporary file, then sent.",
    responses={
        200: {"content": {reports.MEDIA_TYPES["xlsx"]: {}}},
        404: {"description": "No such batch"},
        410: {"description": "The batch was pruned by retention"},
    },
    response_class=FileResponse,
)
def report_xlsx(batch_id: uuid.UUID, _: Annotated[Principal, Depends(require_principal)]) -> FileResponse:
    ctx = _context(batch_id)
    fd, path = tempfile.mkstemp(prefix="assay-report-", suffix=".xlsx")
    try:
        session = new_session()
        try:
            with os.fdopen(fd, "wb") as out:
                reports.write_xlsx(ctx, svc.iter_results(session, ctx.batch_id, status="all"), out)
        finally:
            session.close()
    except BaseException:
        os.unlink(path)
        raise
    return FileResponse(
        path,
        media_type=reports.MEDIA_TYPES["xlsx"],
        filename=f"batch-{batch_id}-report.xlsx",
        background=BackgroundTask(os.unlink, path),
    )
