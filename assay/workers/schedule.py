"""Beat schedule: the reconciler every few minutes, the nightly re-scoring and retention, the batch lane's poller."""

from __future__ import annotations

from typing import Any

from celery.schedules import crontab

from assay.settings import Settings


def nightly(expression: str, setting: str = "ASSAY_RESCORE_SCHEDULE") -> crontab:
    """A five-field crontab expression (UTC), as ``crontab -e`` takes it."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"{setting} must have 5 fields (minute hour day month weekday), got {expression!r}")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    return crontab(minute, hour, day_of_week, day_of_month, month_of_year)


def beat_schedule(settings: Settings) -> dict[str, Any]:
    return {
        "reconcile": {
            "task": "scoring.reconcile",
            "schedule": float(settings.reconcile_interval_seconds),
            # A late beat must not pile up reconcile runs: one that has waited a whole interval is dropped.
            "options": {"expires": float(settings.reconcile_interval_seconds)},
        },
        "rescore-stale": {
            "task": "scoring.rescore_stale",
            "schedule": nightly(settings.rescore_schedule),
            "options": {"expires": float(settings.rescore_expires_seconds)},
        },
        "prune-history": {
            "task": "scoring.prune_history",
            "schedule": nightly(settings.prune_schedule, "ASSAY_PRUNE_SCHEDULE"),
            "options": {"expires": float(settings.rescore_expires_seconds)},
        },
        "online-sample": {
            "task": "scoring.online_sample",
            "schedule": settings.online_sample_interval_seconds,
            "options": {"expires": max(settings.online_sample_interval_seconds, 1.0)},
        },
        "span-partitions": {
            "task": "scoring.span_partitions",
            "schedule": 3600.0,
        },
        "provider-batches": {
            "task": "scoring.provider_batches",
            "schedule": settings.provider_batch_interval_seconds,
            "options": {"expires": settings.provider_batch_interval_seconds},
        },
    }
