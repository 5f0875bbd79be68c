"""Per-process clients (judge, Redis), built lazily after fork and never at import time."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_init, worker_process_init, worker_process_shutdown, worker_ready, worker_shutdown

from assay.per_process import PerProcess
from assay.scoring.pipeline.hooks import registered_hooks
from assay.scoring.pipeline.scorer import JudgeRuntime
from assay.scoring.store.db import reserve_connections, reset_engine
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings

log = logging.getLogger(__name__)


def judge_runtime() -> JudgeRuntime:
    """The process's judge runtime (providers, breaker, governor, catalog), made after fork."""
    return _runtime.get()


class CallSlots:
    """A judge worker process's calls in flight (``judge_concurrency``), all on its judge loop. A task
    takes a slot for each of its components, all at once, before it claims them, so what it claims is
    sent at once: a cancel or a spent budget stops everything not yet claimed, as no claimed call waits
    for a slot. Each call gives its slot back when it ends."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._changed = threading.Condition()

    def take(self, n: int) -> None:
        """Wait until ``n`` (at most ``size``) are free, and take them together: two tasks each holding
        part of what they need could otherwise wait for each other forever. The caller gives back
        what it does not hand to calls, whatever happens."""
        with self._changed:
            self._changed.wait_for(lambda: self._free >= n)
            self._free -= n

    def give(self, n: int = 1) -> None:
        with self._changed:
            self._free += n
            self._changed.notify_all()


def call_slots() -> CallSlots:
    """The process's judge call slots, made after fork."""
    return _slots.get()


def batch_apis() -> dict[str, Any]:
    """The batch lane's provider batch APIs (``BatchAPI`` by provider name: those with a batch API and
    a key here), made after fork."""
    return _batch_apis.get()


def _build_batch_apis() -> dict[str, Any]:
    from assay.scoring.judge.wiring import batch_apis as build

    settings = get_settings()
    return build(settings, load_model_catalog(settings.config_dir))


def _build() -> JudgeRuntime:
    settings = get_settings()
    catalog = load_model_catalog(settings.config_dir)
    from assay.scoring.judge.retry import RetryPolicy
    from assay.scoring.judge.wiring import build_breaker, build_governor, build_providers

    # A provider without its key is left out: its judge components are skipped (the score is partial).
    providers = build_providers(settings, catalog)
    if not providers:
        return JudgeRuntime(providers=providers, breaker=None, governor=None, catalog=catalog)
    return JudgeRuntime(
        providers=providers,
        breaker=build_breaker(settings),
        governor=build_governor(settings, catalog, providers),
        catalog=catalog,
        policy=RetryPolicy(backoff_base_seconds=settings.judge_backoff_base_seconds),
    )


_runtime = PerProcess(_build)
_slots = PerProcess(lambda: CallSlots(get_settings().judge_concurrency))
_batch_apis = PerProcess(_build_batch_apis)


@worker_init.connect
def _size_db_pool(sender: object = None, **_: object) -> None:
    # A threads pool runs `concurrency` tasks in this one process, each needing a connection at times.
    reserve_connections(int(getattr(sender, "concurrency", 0) or 0) + 2)
    reset_engine()


@worker_ready.connect
def _log_pipeline_hooks(**_: object) -> None:
    # A feature whose module a process never imported would miss its scores silently: say what is there.
    log.info("pipeline hooks: %s", registered_hooks())


@worker_process_init.connect
def _after_fork(**_: object) -> None:
    # A forked child must not reuse its parent's connections, nor its sandbox executor's pipe.
    reset_engine()
    from assay.scoring.sandbox import reset_after_fork

    reset_after_fork()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_sandbox(**_: object) -> None:
    from assay.scoring.sandbox import shutdown_sandbox

    shutdown_sandbox()
