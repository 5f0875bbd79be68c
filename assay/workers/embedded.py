"""Embedded mode: the same Celery tasks on SQLite, an in-memory broker and an in-process worker pool.

Nothing to install or start: ``assay run FILE --suite S``. The breaker and rate governor use their
in-process stand-ins behind the same interfaces. Scores land in a SQLite file, so a second run can
read them back (``--db``).

The broker is kombu's in-memory transport with one change (:class:`WakingMemoryTransport`): the
worker waits for the next message or freed slot instead of sleeping a fixed second between polls.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.transport import memory

EMBEDDED_QUEUES = ("metrics", "judge", "control")


class _BrokerEvents:
    """Counts what can let a waiting consumer take a message: one published, or a delivered one
    acknowledged or rejected (a prefetch slot freed). A consumer notes the count before it looks for
    a message and, finding none it may take, waits until the count moves — so nothing that happens
    between its look and its wait is missed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    def happened(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def count(self) -> int:
        with self._changed:
            return self._count

    def wait_after(self, seen: int, timeout: float | None) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._count != seen, timeout)


class _WakingChannel(memory.Channel):
    broker_events = _BrokerEvents()  # one per process, as the in-memory broker's queues are

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        super()._put(queue, message, **kwargs)
        self.broker_events.happened()

    def _put_fanout(self, exchange: str, message: Any, routing_key: str, **kwargs: Any) -> None:
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        self.broker_events.happened()

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)
        self.broker_events.happened()

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue)
        self.broker_events.happened()


class WakingMemoryTransport(memory.Transport):
    """kombu's in-memory transport, event-driven. Its consumer used to sleep ``polling_interval`` (1 s)
    whenever it found no message it could take — the queue empty, or every prefetch slot held by a
    running task — so with acks-late and prefetch 1 each task that ended left its slot idle for up to
    a second, and results landed in bursts a second apart. Here it waits on the broker's events
    instead: a publish, an ack or a reject wakes it at once, and an idle worker uses no CPU.

    A wake-up that brings nothing this consumer may take ends the call as a timeout, as a poll did, so
    the worker's loop gets to look at its own state (a shutdown) between waits."""

    Channel = _WakingChannel

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        seen = self.Channel.broker_events.count()
        try:
            self.cycle.get(self._deliver, timeout=timeout)
            return
        except Empty:
            self.Channel.broker_events.wait_after(seen, timeout)
        try:
            self.cycle.get(self._deliver, timeout=timeout)
        except Empty:
            raise TimeoutError from None  # socket.timeout, which the worker's loop expects


def configure_environment(db_path: Path) -> None:
    """Point settings at SQLite and the in-memory broker. Must run before the Celery app is imported;
    :func:`in_process_worker` then puts the event-driven transport under that broker URL."""
    from assay.settings import get_settings

    db_path.parent.mkdir(parents=True, exist_ok=True)
    os.environ["ASSAY_DATABASE_URL"] = f"sqlite:///{db_path.resolve()}"
    os.environ["ASSAY_BROKER_URL"] = "memory://localhost/"
    os.environ["ASSAY_REDIS_URL"] = ""
    get_settings.cache_clear()


@contextmanager
def in_process_worker(concurrency: int, log_file: Path | None = None) -> Iterator[Any]:
    """An in-process Celery worker. Its log (each failing task's traceback, say) goes to ``log_file``
    when given, so it does not bury the progress bar; ``run_batch`` tells the user about errors.

    When it stops — the batch done, Ctrl-C, SIGTERM turned into ``SystemExit`` — the sandbox executor
    is stopped and its work folder (copies of the datasets) removed: Celery's in-process test worker
    sends no ``worker_shutdown``, the signal that does this in a distributed worker."""
    from celery.contrib.testing.worker import start_worker
    from celery.worker import state

    from assay.scoring.sandbox import shutdown_sandbox
    from assay.workers.app import app

    # Before the first connection: every producer and the consumer share one broker, and the
    # consumer is woken by the producers' publishes.
    app.conf.broker_transport = f"{__name__}:{WakingMemoryTransport.__name__}"
    # Task events exist for Flower; nothing reads them here, and each task would publish three.
    app.conf.worker_send_task_events = False
    app.conf.task_send_sent_event = False
    try:
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
            try:
                yield worker
            finally:
                # start_worker stops the worker by raising this flag, then waits for its thread; the
                # consumer, waiting for a broker event, is woken to see it now rather than at its timeout.
                state.should_terminate = 0
                _WakingChannel.broker_events.happened()
    finally:
        shutdown_sandbox()


def register_datasets(datasets: dict[str, Path]) -> dict[str, str]:
    """Register local table files (a file or a folder of .csv/.parquet/.json) by name; name -> hash."""
    from assay.scoring.intake.datasets import register, tables_from_path
    from assay.scoring.store.db import transaction
    from assay.settings import get_settings

    hashes = {}
    with transaction() as session:
        for name, path in datasets.items():
            tables = tables_from_path(path.resolve().parent, path.name)
            dataset, _ = register(session, tables, name=name, max_bytes=get_settings().max_dataset_bytes)
            hashes[name] = dataset.content_hash
    return hashes


def register_suites(suite: str | Path) -> str:
    """Register the installed suites and, when ``suite`` is a suite file's path, that file after them
    (a suite edited since the last run gets its new criteria); the suite's name."""
    from assay.scoring.store.db import transaction
    from assay.scoring.suites.criteria import register_all_suites, register_suite_file
    from assay.settings import get_settings

    settings = get_settings()
    with transaction() as session:
        register_all_suites(session, settings.config_dir)
        if isinstance(suite, Path):
            return register_suite_file(session, suite, settings.config_dir)
    return suite


def ingest_file(path: Path, suite: str | Path, created_by: str) -> uuid.UUID:
    """Register the suites, stream the file into a new batch (one transaction), return its id.

    ``suite`` is an installed suite's name, or the path of a suite file that is not installed: that
    one is registered after the installed ones and scores the batch."""
    from assay.scoring.intake.ingest import BatchWriter, IngestLimits
    from assay.scoring.kinds import get_kind
    from assay.scoring.store.db import transaction
    from assay.scoring.suites.criteria import current_suite
    from assay.settings import get_settings

    settings = get_settings()
    suite = register_suites(suite)
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


class StallWatch:
    """Whether a run has stalled: nothing finished for ``seconds`` while tasks raised errors meanwhile.

    The clock starts with the run, not at the first poll: a task can fail before the first poll sees
    the batch, and an error then must count (else the run waits for an error that never comes again)."""

    def __init__(self, seconds: float, started_at: float) -> None:
        self.seconds = seconds
        self._done: int | None = None
        self._progressed_at = started_at

    def idle_seconds(self, done: int, now: float, last_error_at: float) -> float | None:
        """How long nothing has finished, if that is a stall by now; else None."""
        if self._done is not None and done != self._done:
            self._progressed_at = now
        self._done = done
        idle = now - self._progressed_at
        return idle if idle > self.seconds and last_error_at > self._progressed_at else None


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


class _SandboxStartNotice(logging.Handler):
    """Passes on the sandbox executor's start-up line (its active layers, and any missing), which a
    distributed worker logs at INFO; here the worker logs only warnings, to a file."""

    def __init__(self, show: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self._show = show

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "sandbox_layers"):
            self._show(record.getMessage())


@contextmanager
def _sandbox_start_shown(show: Callable[[str], None] | None) -> Iterator[None]:
    if show is None:
        yield
        return
    logger = logging.getLogger("assay.sandbox")
    handler, level = _SandboxStartNotice(show), logger.level
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_batch(
    batch_id: uuid.UUID,
    *,
    concurrency: int,
    on_progress: Callable[[dict[str, Any]], None],
    on_finished: Callable[[list[tuple[Any, list[str]]]], None] | None = None,
    on_problem: Callable[[str], None] | None = None,
    on_sandbox_start: Callable[[str], None] | None = None,
    poll_seconds: float = 0.3,
    reconcile_every: float = 30.0,
    stall_seconds: float = 120.0,
    log_file: Path | None = None,
    start: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Plan and score the batch with an in-process worker; returns its final view.

    ``start`` sends the batch's first task once the worker runs (default: its planner; a re-scoring
    run's batch starts with ``rescore_suite``, which fills it and then plans it).

    ``on_finished`` receives the results finished since the last poll as (external id or position,
    live-result lines); ``on_problem`` each distinct error a task raised (the worker's full log goes
    to ``log_file`` when given); ``on_sandbox_start`` the sandbox executor's start-up line with its
    active layers, each time one starts (a pandas suite's first run). Raises ``Stalled`` when nothing
    finished for ``stall_seconds`` and tasks raised errors meanwhile (the scores that finished stay
    in the database)."""
    from celery.signals import task_failure, task_retry

    problems = _TaskProblems(on_problem)
    task_retry.connect(problems.on_retry, weak=False)
    task_failure.connect(problems.on_failure, weak=False)
    try:
        with _sandbox_start_shown(on_sandbox_start), in_process_worker(concurrency, log_file):
            return _drive(batch_id, on_progress, on_finished, problems, poll_seconds, reconcile_every, stall_seconds, start)
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
    start: Callable[[], Any] | None,
) -> dict[str, Any]:
    from assay.scoring.intake import batches as svc
    from assay.scoring.kinds import get_kind
    from assay.scoring.reports.views import batch_view, live_lines
    from assay.scoring.store.db import transaction
    from assay.scoring.suites.criteria import load_criteria
    from assay.workers.tasks import plan_batch, reconcile

    stall = StallWatch(stall_seconds, time.monotonic())
    if start is None:
        plan_batch.apply_async(args=(str(batch_id),))
    else:
        start()
    last_reconcile = time.monotonic()
    seen_until = None
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
        idle = stall.idle_seconds(view["progress"]["done"], time.monotonic(), problems.at)
        if idle is not None:
            raise Stalled(f"nothing finished for {idle:.0f} s while tasks kept failing; last error: {problems.last}")
        if time.monotonic() - last_reconcile > reconcile_every:
            reconcile.apply_async()  # no beat in embedded mode: the loop stands in for it
            last_reconcile = time.monotonic()
        time.sleep(poll_seconds)


def rescore_start(batch_id: uuid.UUID, stale_only: bool, partial: bool) -> Callable[[], Any]:
    """``run_batch``'s ``start`` for a re-scoring run's batch, as ``POST /api/v1/rescore`` starts it."""
    from assay.workers.tasks import rescore_suite

    return lambda: rescore_suite.apply_async(args=(str(batch_id), stale_only, partial))
