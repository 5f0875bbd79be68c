"""Beat schedule: the reconciler every few minutes."""

from __future__ import annotations

from typing import Any

from assay.settings import Settings


def beat_schedule(settings: Settings) -> dict[str, Any]:
    return {
        "reconcile": {
            "task": "scoring.reconcile",
            "schedule": float(settings.reconcile_interval_seconds),
            # A late beat must not pile up reconcile runs: one that has waited a whole interval is dropped.
            "options": {"expires": float(settings.reconcile_interval_seconds)},
        },
    }
