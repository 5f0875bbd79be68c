"""Hands work to the workers, after the transaction that created it has committed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from assay.scoring.pipeline.components import ComponentRef


def start_planner(batch_id: uuid.UUID) -> None:
    from assay.workers.tasks import plan_batch

    plan_batch.apply_async(args=(str(batch_id),))


def publish_components(refs: Sequence[ComponentRef]) -> None:
    from assay.workers.tasks import enqueuer

    enqueuer.enqueue(refs)
