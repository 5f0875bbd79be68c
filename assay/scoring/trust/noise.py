"""The judge's noise floor: how much one item's score moves when the same judge is asked again.

A calibration run (:mod:`assay.scoring.trust.calibration`) judges a sample of items K times under one
criteria hash. From its repeats:

- **σw** (per judge component, and for the total under ``__total__``): the pooled within-item
  standard deviation, ``sqrt(mean over items of the within-item sample variance (ddof=1))``, over the
  items with at least two usable repeats (a judge component landed ``ok``; a total of a ``completed``
  score). Pooling variances (not standard deviations) gives an unbiased variance estimate whatever the
  number of repeats per item.
- **flip share** (total only): the share of those items whose pass/fail was not the same in every
  completed repeat.

``compare`` and ``diff`` read it through :func:`latest_noise` to put a noise floor beside a mean
difference (formulas in :mod:`assay.scoring.trust.stats`).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.store.models import TOTAL_COMPONENT, CalibrationRun, NoiseEstimate

__all__ = ["TOTAL_COMPONENT", "NoiseFloor", "flip_share", "latest_noise", "noise_of_run", "pooled_sigma"]


@dataclass(frozen=True)
class Pooled:
    """σw (None when no item has two usable repeats) and how many items it pooled over."""

    sigma_w: float | None
    items: int


def pooled_sigma(values_by_item: Mapping[Any, Sequence[float]]) -> Pooled:
    """Pooled within-item standard deviation over the items with at least two values."""
    variances = [float(np.var(np.asarray(values, dtype=float), ddof=1)) for values in values_by_item.values() if len(values) >= 2]
    if not variances:
        return Pooled(None, 0)
    return Pooled(math.sqrt(max(0.0, float(np.mean(variances)))), len(variances))


def flip_share(passed_by_item: Mapping[Any, Sequence[bool]]) -> tuple[float | None, int]:
    """Share of the items with at least two verdicts whose pass/fail differs between repeats, and how
    many items that is over (None when there are none)."""
    judged = [set(verdicts) for verdicts in passed_by_item.values() if len(verdicts) >= 2]
    if not judged:
        return None, 0
    return sum(1 for verdicts in judged if len(verdicts) > 1) / len(judged), len(judged)


@dataclass(frozen=True)
class NoiseFloor:
    """One calibration run's estimates for a criteria hash."""

    run_id: uuid.UUID
    criteria_hash: str
    sigma_w: dict[str, float | None]  # judge component -> σw; the total under ``__total__``
    flip_share: float | None
    items: int  # items pooled for the total
    repeats: int
    computed_at: datetime
    items_by_component: dict[str, int]

    @property
    def total(self) -> float | None:
        return self.sigma_w.get(TOTAL_COMPONENT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "calibration_run_id": str(self.run_id),
            "criteria_hash": self.criteria_hash,
            "sigma_w": {name: _round(value) for name, value in self.sigma_w.items() if name != TOTAL_COMPONENT},
            "sigma_w_total": _round(self.total),
            "flip_share": _round(self.flip_share),
            "items": self.items,
            "items_by_component": {k: v for k, v in self.items_by_component.items() if k != TOTAL_COMPONENT},
            "repeats": self.repeats,
            "computed_at": self.computed_at.isoformat(),
        }


def _round(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def _floor(rows: Iterable[NoiseEstimate]) -> NoiseFloor | None:
    rows = list(rows)
    if not rows:
        return None
    total = next((r for r in rows if r.component == TOTAL_COMPONENT), rows[0])
    return NoiseFloor(
        run_id=total.calibration_run_id,
        criteria_hash=total.criteria_hash,
        sigma_w={r.component: r.sigma_w for r in rows},
        flip_share=total.flip_share if total.component == TOTAL_COMPONENT else None,
        items=total.items,
        repeats=total.repeats,
        computed_at=total.computed_at,
        items_by_component={r.component: r.items for r in rows},
    )


def noise_of_run(session: Session, run_id: uuid.UUID) -> NoiseFloor | None:
    """A calibration run's stored estimates (None before its batch finished)."""
    return _floor(session.scalars(select(NoiseEstimate).where(NoiseEstimate.calibration_run_id == run_id)))


def latest_noise(session: Session, criteria_hash: str) -> NoiseFloor | None:
    """The noise floor of the latest calibration run under ``criteria_hash`` whose estimates are
    stored, or None ("no noise floor measured")."""
    run_id = session.scalar(
        select(NoiseEstimate.calibration_run_id)
        .join(CalibrationRun, CalibrationRun.id == NoiseEstimate.calibration_run_id)
        .where(NoiseEstimate.criteria_hash == criteria_hash, NoiseEstimate.component == TOTAL_COMPONENT)
        .order_by(NoiseEstimate.computed_at.desc(), CalibrationRun.created_at.desc())
        .limit(1)
    )
    return noise_of_run(session, run_id) if run_id is not None else None
