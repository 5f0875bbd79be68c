"""What every component task does with the store around its work: read the claimed work, land
results, defer components; each write retried through a short outage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic
from sqlalchemy.exc import DBAPIError, OperationalError
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from assay.scoring.errors import AssayError
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.budgets import stop_for_budget
from assay.scoring.pipeline.claims import Claim, defer
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.landing import Landing, land, land_many
from assay.scoring.pipeline.reconcile import expire_poison
from assay.scoring.pipeline.scorer import WorkUnit, work_from_row, work_rows
from assay.scoring.store.db import transaction
from assay.settings import get_settings

# Retry a store write through a short outage (Postgres restart) rather than lose paid work.
store_retry = retry(
    retry=retry_if_exception_type((OperationalError, DBAPIError)),
    wait=wait_exponential(multiplier=0.5, max=10),
    stop=stop_after_delay(180),
    reraise=True,
)


def claimed_works(
    session: Any, refs: Sequence[ComponentRef], claims: dict[ComponentRef, Claim], owner: str
) -> dict[ComponentRef, WorkUnit]:
    """The work of each component of a group this task claimed, read in one query, each score's item
    validated once for all its components; those with nothing to compute are left out."""
    rows = work_rows(session, {ref.score_id for ref in refs if claims[ref].state == "claimed"})
    items: dict[Any, Any] = {}
    return {
        ref: work
        for ref in refs
        if (work := claimed_work(session, ref, claims[ref], owner, rows.get(ref.score_id), items)) is not None
    }


def claimed_work(
    session: Any, ref: ComponentRef, claim: Claim, owner: str, row: Any, items: dict[Any, Any] | None = None
) -> WorkUnit | None:
    """The work of a component this task claimed (``row``: its score's, from ``work_rows``; ``items``:
    see ``work_from_row``), or None when there is nothing to compute: not claimed, failed as poison,
    stopped by its batch's budget, or its stored work unreadable."""
    if claim.state != "claimed":
        return None  # landed already (a duplicate delivery), gone (deleted batch), or busy elsewhere
    if expire_poison(session, ref, claim.attempts, get_settings().max_component_attempts):
        return None
    if claim.budget_spent:
        stop_for_budget(session, ref, owner)
        return None
    try:
        return work_from_row(session, ref, row, items)
    except (AssayError, pydantic.ValidationError) as exc:  # no rerun can fix the stored work
        land(session, ref, ComponentResult.failed(f"the stored work cannot be read: {exc}"), claim=claim)
        return None


@store_retry
def land_results(
    results: dict[ComponentRef, ComponentResult],
    claims: dict[ComponentRef, Claim],
    items: dict[Any, Any] | None = None,
) -> None:
    """Land results in one transaction (one commit for all); ``items``: their scores' items, already
    validated (by score id), for the finalize of the scores they complete."""
    with transaction() as session:
        land_many(
            session, [Landing(ref, result, claims[ref]) for ref, result in results.items()], items=items
        )


@store_retry
def defer_component(ref: ComponentRef, owner: str, retry_in: float, reason: str, **options: Any) -> None:
    with transaction() as session:
        defer(session, ref, owner, retry_in, reason, **options)
