"""Human labels and the machine's agreement with them: thin adapters over ``assay.scoring.trust.labels``
and ``assay.scoring.trust.agreement``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from assay.api.auth import Principal, require_principal
from assay.api.content_type import UnsupportedMediaType, require_content_type
from assay.api.json_body import StrictJsonRoute
from assay.api.params import CriteriaHashFilter, SuiteName
from assay.scoring import slices as slicing
from assay.scoring.store.db import transaction
from assay.scoring.trust import agreement, labels
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/suites", tags=["labels"], route_class=StrictJsonRoute)

CSV_TYPE = "text/csv"
JSONL_TYPE = "application/x-ndjson"

LABELS_DOC = f"""Store human labels for items of the suite, as **CSV** (`Content-Type: {CSV_TYPE}`, a header
row naming the columns) or **JSONL** (`Content-Type: {JSONL_TYPE}`, one object per line); the
content type decides. Fields: `item_id`, or `batch_id` and `external_id` (the item with that external
id in that batch of the suite); `passed` (true/false; in CSV also pass/fail, yes/no, 1/0) and/or
`score` (0 to 1); `annotator`; `comment`.

Labels belong to who wrote them. A row without an `annotator`, or naming the caller (`key:NAME` for
an API key or a dashboard session, `proxy:NAME` for a proxy user, or the bare NAME), is the caller's
own label: it replaces the caller's earlier upload on the item (`replaced`); a label the caller's
review recorded changes only through a review (`skipped`). A row naming anyone else is an import of
that annotator's label (`imported`, stored as written by the caller, source `import`): it never
replaces a label, and is `skipped` when the annotator already has one on the item. Naming another
principal's `key:`/`proxy:` form is a bad row. Skipped rows are listed in `skipped_lines` with the
reason. One transaction: by default any bad row rejects the upload (422, the bad rows listed with
their line numbers, nothing stored); with `partial=true` the good rows are stored and the bad ones
reported. A body over `ASSAY_MAX_BODY_BYTES` gets 413."""

LABELS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            CSV_TYPE: {"schema": {"type": "string"}},
            JSONL_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}

AGREEMENT_DOC = f"""How the suite's machine verdicts agree with its human labels, per criteria hash (`criteria_hash`,
or by default every hash under which a labelled item has a completed score, newest criteria first).
The machine verdict is each labelled item's latest completed score under the hash; the human verdict
is the majority of the item's labels (a label with only a score votes pass when it reaches the
hash's threshold), ties reported apart. Each hash reports accuracy, Cohen's kappa on pass/fail (from
the confusion matrix), Spearman's rank correlation between machine total and mean human score
(null with the reason under 3 pairs or when a side is constant), the confusion matrix, the ties
and the disagreeing items (largest gap between total and human score first, up to `limit` each).

`components` gives the same statistics for each judge component: its score against the mean human
score (Spearman) and, as a verdict passing when the score reaches the threshold, against the people's
majority (accuracy, kappa, confusion matrix); an item where the component did not land `ok` has no
verdict from it. With `by=metadata.KEY`, `slices` gives the total's and each component's statistics
per slice of the labelled items (the {slicing.MAX_SLICES} largest values kept apart, the rest grouped as `other`; a
slice under {slicing.MIN_SLICE_ITEMS} compared items flagged `small: true`); a key holding objects or arrays is refused with 400."""


@router.post(
    "/{name}/labels",
    summary="Upload human labels (CSV or JSONL)",
    description=LABELS_DOC,
    openapi_extra=LABELS_BODY,
    dependencies=[Depends(require_content_type(CSV_TYPE, JSONL_TYPE))],
    responses={
        404: {"description": "No such suite"},
        413: {"description": "Body over ASSAY_MAX_BODY_BYTES"},
        415: {"description": "A Content-Type other than text/csv or application/x-ndjson, or none"},
        422: {"description": "Bad rows (listed with their line numbers), or a CSV header with an unknown column"},
    },
)
async def upload_labels(
    request: Request,
    name: SuiteName,
    principal: Annotated[Principal, Depends(require_principal)],
    partial: Annotated[bool, Query(description="Store the good rows when some are bad.")] = False,
) -> dict[str, Any]:
    declared = request.headers.get("content-type")
    media_type = declared.split(";", 1)[0].strip().lower() if declared else ""
    if media_type not in (CSV_TYPE, JSONL_TYPE):
        raise UnsupportedMediaType(
            f"declare the body's format: Content-Type {CSV_TYPE} or {JSONL_TYPE}", accepted=[CSV_TYPE, JSONL_TYPE]
        )
    body = await request.body()
    settings = get_settings()

    def store() -> dict[str, Any]:
        rows = (labels.csv_rows if media_type == CSV_TYPE else labels.jsonl_rows)(body)
        with transaction() as session:
            return labels.store_labels(
                session,
                name,
                rows,
                uploader=principal.id,
                partial=partial,
                max_reported_bad_lines=settings.max_reported_bad_lines,
            ).to_dict()

    return await run_in_threadpool(store)


@router.get("/{name}/agreement", summary="Agreement of the machine with human labels", description=AGREEMENT_DOC)
def suite_agreement(
    name: SuiteName,
    _: Annotated[Principal, Depends(require_principal)],
    criteria_hash: CriteriaHashFilter = None,
    limit: Annotated[int, Query(ge=0, le=1000, description="Ties and disagreeing items listed per hash.")] = 100,
    by: Annotated[
        str | None, Query(max_length=120, description="metadata.KEY: also report each slice of the labelled items")
    ] = None,
) -> dict[str, Any]:
    with transaction() as session:
        return agreement.suite_agreement(session, name, criteria_hash, limit=limit, by=by)
