"""Celery beat registers the suites when it starts and fires the reconciler on its schedule."""

import os
import signal
import subprocess
import sys

from sqlalchemy import func, select, text

from assay.scoring.store.db import transaction
from assay.scoring.store.models import SuiteRecord
from tests.conftest import wait_for, worker_env


def test_beat_registers_suites_and_schedules_the_reconciler(clean_db, live_worker_factory, tmp_path):
    with transaction() as s:
        s.execute(text("DELETE FROM suites"))
    # Beat alone first: no worker runs, so only beat itself can register the suites.
    beat = subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "beat"],
        env=worker_env({"ASSAY_BEAT_SCHEDULE_FILE": str(tmp_path / "schedule")}),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        def suites() -> int:
            with transaction() as s:
                return s.scalar(select(func.count()).select_from(SuiteRecord))

        assert wait_for(suites, timeout=60, message="beat to register the suites") >= 2
        worker = live_worker_factory()
        # The reconciler runs every ASSAY_RECONCILE_INTERVAL_SECONDS (5 s in the tests) in the worker.
        wait_for(lambda: "scoring.reconcile" in worker.log.read_text(), timeout=60, message="a reconcile run")
    finally:
        os.killpg(beat.pid, signal.SIGTERM)
        beat.wait(timeout=20)
