"""Budgets: what a budgeted batch has spent, kept on its row, and stopping a batch whose budget is spent."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from sqlalchemy import (
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from assay.scoring.pipeline.completion import complete_batch_if_done, finish_batch_after_commit
from assay.scoring.pipeline.components import COMPONENTS as _components
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    LANDED_COMPONENT_STATUSES,
    Batch,
    Score,
    utcnow,
)

log = logging.getLogger(__name__)


def charge_score(session: Session, score_id: uuid.UUID, cost_usd: float | None) -> None:
    """Add a spend outside a landing (a deferred or redirected attempt) to the score's batch."""
    if cost_usd:
        charge_batch(session, session.scalar(select(Score.batch_id).where(Score.id == score_id)), cost_usd)


def charge_batch(session: Session, batch_id: uuid.UUID | None, cost_usd: float | None) -> None:
    """What a batch with a budget has spent, kept on its row (same transaction as the spend).

    Only for budgeted batches: the update locks the batch row until commit, and every concurrent
    landing of the batch would queue behind it (a batch's total cost is in its summary anyway)."""
    if batch_id is not None and cost_usd:
        session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.budget_usd.is_not(None))
            .values(spent_usd=Batch.spent_usd + cost_usd)
        )


BUDGET_EXHAUSTED = "budget_exhausted"


# Whether a component's batch has spent its budget (judge calls must stop), or has one at all, as a
# scalar subquery for the claim's RETURNING. Plain SQL: SQLAlchemy drops table names from a RETURNING
# clause on SQLite, which leaves a joined subquery's columns ambiguous there.
_BUDGET_STATE_SQL = (
    "(SELECT CASE WHEN {test} THEN 1 ELSE 0 END"
    " FROM scores AS assay_s JOIN batches AS assay_b ON assay_b.id = assay_s.batch_id"
    " WHERE assay_s.id = score_components.score_id)"
)
BUDGET_SPENT = (
    f"assay_b.status = '{BUDGET_EXHAUSTED}'"
    " OR (assay_b.budget_usd IS NOT NULL AND assay_b.spent_usd >= assay_b.budget_usd)"
)
BUDGETED = "assay_b.budget_usd IS NOT NULL"


def budget_state(test: str, wanted: bool) -> Any:
    """1 or 0 for a component's batch (``BUDGET_SPENT``, ``BUDGETED``), or a constant 0 when not ``wanted``."""
    return literal_column(_BUDGET_STATE_SQL.format(test=test) if wanted else "0")


def stop_for_budget(session: Session, ref: ComponentRef, owner: str) -> None:
    """The batch's budget is spent: end the batch ``budget_exhausted`` and cancel this score and every
    score not planned yet (finished scores are kept). Scores already planned are cancelled one by one
    as their judge tasks arrive, without a call; a call already in flight still lands."""
    batch_id = session.scalar(select(Score.batch_id).where(Score.id == ref.score_id))
    batch = session.get(Batch, batch_id, with_for_update=True, populate_existing=True) if batch_id else None
    if batch is None:
        return
    now = utcnow()
    reason = f"budget exhausted: spent ${batch.spent_usd:.4f} of ${batch.budget_usd or 0:.4f}"
    cancelled = {"status": "cancelled", "completed_at": now, "error_kind": BUDGET_EXHAUSTED, "error_message": reason}
    unplanned = 0
    if batch.status in ("planning", "running"):
        batch.status = BUDGET_EXHAUSTED
        unplanned = session.execute(
            update(Score)
            .where(Score.batch_id == batch.id, Score.status == "pending", Score.position > batch.planned_position)
            .values(**cancelled)
        ).rowcount or 0
    c = _components.c
    session.execute(
        update(_components)
        .where(
            c.score_id == ref.score_id,
            c.status.not_in(LANDED_COMPONENT_STATUSES),
            # Another task's live lease means a call in flight: let it land (it is paid for).
            or_(c.status != "in_progress", c.lease_owner == owner, c.lease_expires_at < now),
        )
        .values(status="cancelled", reason=reason, lease_owner=None, lease_expires_at=None, run_after=None)
    )
    this = session.execute(
        update(Score).where(Score.id == ref.score_id, Score.status.in_(ACTIVE_SCORE_STATUSES)).values(**cancelled)
    ).rowcount or 0
    session.flush()
    complete_batch_if_done(session, batch)
    finish_batch_after_commit(session, batch.id)  # a landing may be finishing the last score right now
    log.warning("batch %s: %s; cancelled %d score(s)", batch.id, reason, unplanned + this)
