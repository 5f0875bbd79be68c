"""The features built on the pipeline that react to its hooks: the review queue (scores finalized),
calibration and pairwise runs (a batch completed), juries (their members landed). Every process that lands scores or completes batches (the workers,
the embedded run, the API) imports this module when it starts, so that their hooks are registered;
the pipeline itself imports none of them (ARCHITECTURE.md, invariant 10)."""

from __future__ import annotations

from assay.scoring.pipeline.hooks import registered_hooks
from assay.scoring.trust import calibration, jury, pairwise, review

FEATURE_MODULES = (calibration, jury, pairwise, review)

__all__ = ["FEATURE_MODULES", "registered_hooks"]
