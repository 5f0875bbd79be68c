"""A batch's results export (``GET /api/v1/batches/{id}/results?format=jsonl|csv``, ``assay results``):
every result, streamed, each with the item's content and the human verdict beside the machine one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Literal

from sqlalchemy.orm import Session

from assay.scoring.intake import batches as svc
from assay.scoring.kinds import get_kind
from assay.scoring.reports.batch_reports import generic_columns, generic_row, metadata_cells, metadata_keys
from assay.scoring.reports.csv_writer import csv_chunks
from assay.scoring.reports.views import export_view
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.trust.review import HUMAN_COLUMNS, human_cells, with_human_verdicts

ExportFormat = Literal["jsonl", "csv"]


def results_export(session: Session, batch_id: uuid.UUID, status: str, fmt: ExportFormat) -> Iterator[str]:
    """JSONL (full views, plus the kind's report columns under ``report``) or CSV (the kind's report
    columns when it names them, else the columns derived from the suite's components), each with the
    human verdict (``human`` in JSONL, the ``human_*`` columns in CSV). ``session`` stays open while
    the chunks are read."""
    criteria = load_criteria(session, svc.scored_batch(session, batch_id).criteria_hash)
    kind = get_kind(criteria.kind)
    keys = metadata_keys(session, batch_id) if fmt == "csv" else []
    rows = with_human_verdicts(svc.iter_results(session, batch_id, status=status), session=session)
    if fmt == "jsonl":
        for score, human in rows:
            view = export_view(score, threshold=criteria.threshold)
            if kind.report_row is not None:
                view["report"] = kind.report_row(score)
            view["human"] = human_cells(human)
            yield json.dumps(view) + "\n"
        return
    if kind.report_row is not None:
        yield from csv_chunks(
            {**kind.report_row(score), **metadata_cells(score, keys), **human_cells(human)} for score, human in rows
        )
    else:
        yield from csv_chunks(
            ({**generic_row(score, criteria, keys), **human_cells(human)} for score, human in rows),
            [*generic_columns(criteria, keys), *HUMAN_COLUMNS],
        )
