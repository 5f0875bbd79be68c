"""A real worker process has the pipeline's feature hooks registered: a hook module that a process
never imports would miss every score it lands, silently (the review queue would stay empty, a
calibration run would never finish)."""

from __future__ import annotations

import ast
import re

from tests.conftest import wait_for


def test_a_worker_process_registers_the_review_and_calibration_hooks(live_worker_factory):
    worker = live_worker_factory(queues="metrics,judge,control", concurrency=1)
    line = wait_for(
        lambda: re.search(r"pipeline hooks: (\{.*\})", worker.log.read_text(errors="replace")),
        timeout=60,
        message="the worker's 'pipeline hooks' log line",
    )
    hooks = ast.literal_eval(line.group(1))
    assert "assay.scoring.trust.review.after_finalize" in hooks["scores_finalized"]
    assert "assay.scoring.trust.calibration.batch_completed" in hooks["batch_completed"]
