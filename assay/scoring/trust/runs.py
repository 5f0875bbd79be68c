"""Runs carried by a batch (a calibration run, a pairwise run): what they share.

The run's row names its batch; the batch's summary names the run under the feature's *marker*
(``{"calibration": {"run_id": …}}``), which is how the planner and the batch-completed hook know what
the batch is for. The pipeline does the work; the batch's status decides the run's:

- while the batch is planning or running, the run is ``running`` (again, after a resume);
- when it ends, a batch-completed hook of the feature stores the run's result: ``completed`` (a budget
  cut too: the result covers what was judged), ``cancelled`` or ``failed`` (:data:`RUN_STATUS_BY_BATCH`);
- a batch cancelled (its completion hook does not run) or deleted under a running run ends it as
  ``cancelled`` (or ``failed``) when it is read.
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from assay.scoring.intake.batches import planning_batch
from assay.scoring.pipeline.summaries import batch_counts
from assay.scoring.store.models import Batch, CalibrationRun, PairwiseRun

RUN_STATUS_BY_BATCH = {"completed": "completed", "budget_exhausted": "completed", "cancelled": "cancelled", "failed": "failed"}
_ACTIVE_BATCH = ("planning", "running")


# A run: a CalibrationRun or a PairwiseRun (id, suite_name, criteria_hash, batch_id, status,
# created_by, created_at, completed_at).
Run = TypeVar("Run", CalibrationRun, PairwiseRun)


def start_run_batch(
    session: Session,
    run: CalibrationRun | PairwiseRun,
    marker: str,
    *,
    suite_name: str,
    lane: str,
    budget_usd: float | None,
    total_items: int = 0,
    summary: dict[str, Any] | None = None,
) -> Batch:
    """The run's batch (its summary naming the run under ``marker``), and the run stored beside it."""
    batch = planning_batch(
        session,
        suite_name=suite_name,
        criteria_hash=run.criteria_hash,
        created_by=run.created_by,
        lane=lane,
        budget_usd=budget_usd,
        summary={marker: {"run_id": str(run.id), **(summary or {})}},
        total_items=total_items,
        now=run.created_at,
    )
    run.batch_id = batch.id
    session.add(run)
    session.flush()
    return batch


def run_of_batch(session: Session, batch: Batch, marker: str, model: type[Run]) -> tuple[Run, str] | None:
    """The run a finished batch carries (locked) and the status the batch gives it; None when the
    batch carries none under ``marker`` or has not ended."""
    run_id = (batch.summary or {}).get(marker, {}).get("run_id")
    status = RUN_STATUS_BY_BATCH.get(batch.status)
    if not run_id or status is None:
        return None
    run = session.get(model, uuid.UUID(run_id), with_for_update=True)
    return None if run is None else (run, status)


def run_batch(session: Session, run: CalibrationRun | PairwiseRun) -> Batch | None:
    return session.get(Batch, run.batch_id) if run.batch_id else None


def run_status(run: CalibrationRun | PairwiseRun, batch_status: str | None) -> str:
    """The run's status given its batch's (None: the batch was deleted)."""
    if batch_status in _ACTIVE_BATCH:
        return "running"
    if run.status == "running" and batch_status in (None, "cancelled", "failed"):
        return "failed" if batch_status == "failed" else "cancelled"
    return str(run.status)


def batch_fields(session: Session, run: CalibrationRun | PairwiseRun) -> dict[str, Any]:
    """The part of a run's view that its batch gives: status, progress, spend, budget, times."""
    batch = run_batch(session, run)
    return {
        "status": run_status(run, batch.status if batch is not None else None),
        "batch_id": str(run.batch_id) if run.batch_id else None,
        "batch_status": batch.status if batch is not None else None,
        "progress": batch_counts(session, batch.id) if batch is not None else None,
        "spent_usd": round(batch.spent_usd, 6) if batch is not None else None,
        "budget_usd": batch.budget_usd if batch is not None else None,
        "created_by": run.created_by,
        "created_at": run.created_at.isoformat(),
        "completed_at": run.completed_at.isoformat() if run.completed_at else None,
    }
