"""Embedded mode: the same Celery tasks on SQLite, an in-memory broker and an in-process worker pool.

Nothing to install or start: ``assay run FILE --suite S``. The breaker and rate governor use their
in-process stand-ins behind the same interfaces. Scores land in a SQLite file, so a second run can
read them back (``--db``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import datetime, timezone
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

EMBEDDED_QUEUES = ("metrics", "judge", "control")


def configure_environment(db_path: Path) -> None:
    """Point settings at SQLite and the in-memory broker. Must run before the Celery app is imported."""
    from assay.settings import get_settings

    db_path.parent.mkdir(parents=True, exist_ok=True)
    os.environ["ASSAY_DATABASE_URL"] = f"sqlite:///{db_path.resolve()}"
    os.environ["ASSAY_BROKER_URL"] = "memory://localhost/"
    os.environ["ASSAY_REDIS_URL"] = ""
    get_settings.cache_clear()


@contextmanager
def in_process_worker(concurrency: int, log_file: Path | None = None) -> Iterator[Any]:
    """An in-process Celery worker. Its log (each failing task's traceback, say) goes to ``log_file``
    when given, so it does not bury the progress bar; ``run_batch`` tells the user about errors."""
    from celery.contrib.testing.worker import start_worker

    from assay.workers.app import app

    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        loglevel="WARNING",
        logfile=str(log_file) if log_file is not None else None,
        queues=list(EMBEDDED_QUEUES),
        shutdown_timeout=30.0,
    ) as worker:
        yield worker


def register_datasets(datasets: dict[str, Path]) -> dict[str, str]:
    """Register local table files (a file or a folder of .csv/.parquet/.json) by name; name -> hash."""
    from assay.scoring.datasets import register, tables_from_path
    from assay.scoring.store.db import transaction
    from assay.settings import get_settings

    hashes = {}
    with transaction() as session:
        for name, path in datasets.items():
            tables = tables_from_path(path.resolve().parent, path.name)
            dataset, _ = register(session, tables, name=name, max_bytes=get_settings().max_dataset_bytes)
            hashes[name] = dataset.content_hash
    return hashes


def ingest_file(path: Path, suite: str, created_by: str) -> uuid.UUID:
    """Register the suites, stream the file into a new batch (one transaction), return its id."""
    from assay.scoring.criteria import current_suite, register_all_suites
    from assay.scoring.ingest import BatchWriter, IngestLimits
    from assay.scoring.kinds import get_kind
    from assay.scoring.store.db import transaction
    from assay.settings import get_settings

    settings = get_settings()
    with transaction() as session:
        register_all_suites(session, settings.config_dir)
    with transaction() as session:
        record = current_suite(session, suite)
        writer = BatchWriter(
            session,
            suite=record,
            kind=get_kind(record.kind),
            created_by=created_by,
            limits=IngestLimits(
                max_items=settings.max_items_per_batch,
                max_item_bytes=settings.max_item_bytes,
                max_body_bytes=settings.max_upload_bytes,
                max_reported_bad_lines=settings.max_reported_bad_lines,
            ),
        )
        writer.begin()
        try:
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    writer.feed(chunk)
            result = writer.finish()
        except BaseException:
            writer.abort()
            raise
        return result.batch.id


class Stalled(Exception):
    """The batch made no progress for ``stall_seconds`` while its tasks kept raising errors."""


class _TaskProblems:
    """Errors the in-process worker's tasks raised (Celery retries and failures), each told once.

    A distributed worker logs them for its operator; here the person at the terminal is the operator,
    and without this a task failing over and over looks like a silent hang."""

    def __init__(self, report: Callable[[str], None] | None) -> None:
        self._report = report
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self.last: str | None = None
        self.at = 0.0

    def note(self, task: Any, error: Any) -> None:
        from celery.exceptions import Retry

        from assay.scoring.judge.service import JudgeDeferred

        if isinstance(error, Retry) and error.exc is not None:
            error = error.exc  # a retry's reason is Celery's Retry; what went wrong is inside it
        if isinstance(error, JudgeDeferred):
            return  # waiting out the provider (breaker, rate limit) is progress delayed, not an error
        name = getattr(task, "name", None) or str(task)
        message = f"{name}: {type(error).__name__}: {error}".splitlines()[0][:500]
        with self._lock:
            self.last, self.at = message, time.monotonic()
            new = message not in self._seen
            self._seen.add(message)
        if new and self._report is not None:
            self._report(message)

    def on_retry(self, sender: Any = None, reason: Any = None, **_: Any) -> None:
        self.note(sender, reason)

    def on_failure(self, sender: Any = None, exception: Any = None, **_: Any) -> None:
        self.note(sender, exception)


def run_batch(
    batch_id: uuid.UUID,
    *,
    concurrency: int,
    on_progress: Callable[[dict[str, Any]], None],
    on_finished: Callable[[list[tuple[Any, list[str]]]], None] | None = None,
    on_problem: Callable[[str], None] | None = None,
    poll_seconds: float = 0.3,
    reconcile_every: float = 30.0,
    stall_seconds: float = 120.0,
    log_file: Path | None = None,
) -> dict[str, Any]:
    """Plan and score the batch with an in-process worker; returns its final view.

    ``on_finished`` receives the results finished since the last poll as (external id or position,
    live-result lines); ``on_problem`` each distinct error a task raised (the worker's full log goes
    to ``log_file`` when given). Raises ``Stalled`` when nothing finished for ``stall_seconds`` and
    tasks raised errors meanwhile (the scores that finished stay in the database)."""
    from celery.signals import task_failure, task_retry

    problems = _TaskProblems(on_problem)
    task_retry.connect(problems.on_retry, weak=False)
    task_failure.connect(problems.on_failure, weak=False)
    try:
        with in_process_worker(concurrency, log_file):
            return _drive(batch_id, on_progress, on_finished, problems, poll_seconds, reconcile_every, stall_seconds)
    finally:
        task_retry.disconnect(problems.on_retry)
        task_failure.disconnect(problems.on_failure)


def _drive(
    batch_id: uuid.UUID,
    on_progress: Callable[[dict[str, Any]], None],
    on_finished: Callable[[list[tuple[Any, list[str]]]], None] | None,
    problems: _TaskProblems,
    poll_seconds: float,
    reconcile_every: float,
    stall_seconds: float,
) -> dict[str, Any]:
    from assay.scoring import batches as svc
    from assay.scoring.criteria import load_criteria
    from assay.scoring.kinds import get_kind
    from assay.scoring.store.db import transaction
    from assay.scoring.views import batch_view, live_lines
    from assay.workers.tasks import plan_batch, reconcile

    plan_batch.apply_async(args=(str(batch_id),))
    last_reconcile = time.monotonic()
    seen_until = None
    done, progressed_at = -1, time.monotonic()
    while True:
        with transaction() as session:
            batch = svc.get_batch(session, batch_id)
            view = batch_view(batch, svc.progress(session, batch))
            if on_finished is not None:
                criteria = load_criteria(session, batch.criteria_hash)
                kind = get_kind(criteria.kind)
                page = svc.results_page(
                    session, batch_id, status="finished", limit=500, offset=0,
                    finished_after=seen_until or datetime.min.replace(tzinfo=timezone.utc),
                )
                if page.rows:
                    seen_until = page.rows[-1].completed_at
                    on_finished(
                        [
                            (s.item.external_id or f"#{s.position}", live_lines(s, kind, criteria.threshold))
                            for s in page.rows
                        ]
                    )
        on_progress(view)
        if view["status"] not in ("planning", "running"):
            return view
        now = time.monotonic()
        if view["progress"]["done"] != done:
            done, progressed_at = view["progress"]["done"], now
        elif now - progressed_at > stall_seconds and problems.at > progressed_at:
            raise Stalled(
                f"nothing finished for {now - progressed_at:.0f} s while tasks kept failing; last error: "
                f"{problems.last}"
            )
        if time.monotonic() - last_reconcile > reconcile_every:
            reconcile.apply_async()  # no beat in embedded mode: the loop stands in for it
            last_reconcile = time.monotonic()
        time.sleep(poll_seconds)
