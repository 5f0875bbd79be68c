"""Completing a batch once none of its scores is active, checked after the commit that finished its
last score (or by the reconciler when a crash cut that check off)."""

from __future__ import annotations

import uuid

from sqlalchemy import (
    bindparam,
    select,
)
from sqlalchemy.orm import Session

from assay.scoring.pipeline.components import SCORES as _scores
from assay.scoring.pipeline.hooks import batch_completed
from assay.scoring.pipeline.summaries import batch_summary
from assay.scoring.store.db import after_commit, transaction
from assay.scoring.store.models import (
    ACTIVE_SCORE_STATUSES,
    Batch,
    utcnow,
)

_s = _scores.c


def _active_left(session: Session, batch_id: uuid.UUID) -> bool:
    return session.execute(_ACTIVE_SCORE_OF_BATCH, {"b_batch_id": batch_id}).first() is not None


_ACTIVE_SCORE_OF_BATCH = (
    select(_s.id).where(_s.batch_id == bindparam("b_batch_id"), _s.status.in_(ACTIVE_SCORE_STATUSES)).limit(1)
)


def finish_batch_after_commit(session: Session, batch_id: uuid.UUID) -> None:
    """Once this transaction (which finished a score of the batch) commits, see whether the batch is done.

    After the commit, not inside it: of several transactions finishing a batch's last scores at once,
    each sees the others' scores still active, but the last to commit sees them all finished. And not
    a counter on the batch row: every landing would queue on that row's lock until its commit. A
    crash between the commit and the check leaves the batch to the reconciler."""
    def finish() -> None:
        with transaction() as fresh:
            if not _active_left(fresh, batch_id):  # the usual answer, read without taking the row's lock
                batch = fresh.get(Batch, batch_id, with_for_update=True, populate_existing=True)
                if batch is not None:
                    complete_batch_if_done(fresh, batch)

    after_commit(session, ("finish_batch", batch_id), finish)


def complete_batch_if_done(session: Session, batch: Batch) -> None:
    """Complete a batch none of whose scores is active any more (the caller holds its row's lock)."""
    if batch.status in ("running", "budget_exhausted") and batch.finished_at is None:
        if _active_left(session, batch.id):
            return
        if batch.status == "running":
            batch.status = "completed"
        batch.finished_at = utcnow()
        batch.summary = {**(batch.summary or {}), **batch_summary(session, batch.id)}
        batch_completed(session, batch)  # the features' hooks (calibration's noise estimates), same transaction
