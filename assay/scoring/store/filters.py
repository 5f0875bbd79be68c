"""Shared query filters over the store.

:func:`machine_scores` keeps calibration scores (one item judged K times on purpose to measure the
judge's noise, ``scores.calibration_run_id`` set) out of every reader of machine verdicts: latest-
score lookups, sessions, re-scoring's selection, diff, compare, agreement, training data, batch
summaries, the Criteria page and Prometheus outcomes. Those scores are read only by the calibration
service (:mod:`assay.scoring.trust.calibration`) and its noise estimate.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement

from assay.scoring.store.models import Score


def machine_scores(score: Any = Score) -> ColumnElement[bool]:
    """``score.calibration_run_id IS NULL``: a machine score, not a calibration repeat.

    ``score`` is the :class:`Score` entity (default), an ``aliased(Score)`` or a table/subquery whose
    columns include ``calibration_run_id``."""
    column = score.calibration_run_id if hasattr(score, "calibration_run_id") else score.c.calibration_run_id
    return column.is_(None)
