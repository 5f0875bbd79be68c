"""The Celery app, its queues and the one task decorator that sets the defaults once."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Callable

from celery import Celery
from celery.signals import beat_init
from kombu import Exchange
from kombu import Queue as KombuQueue

from assay.settings import get_settings


class Queue(StrEnum):
    METRICS = "metrics"  # deterministic components, prefork pool
    JUDGE = "judge"  # judge calls, threads pool (I/O bound)
    CONTROL = "control"  # planner, reconciler, re-scoring, the online sampler
    # Online scores' components (assay.scoring.online): a worker of `metrics` or `judge` consumes the
    # online queue of its kind too, listed first, and takes from it first (queue_order_strategy below).
    ONLINE_METRICS = "online-metrics"
    ONLINE_JUDGE = "online-judge"


# What a worker started on a queue consumes besides it: a batch queue's online twin.
CONSUMED_WITH = {Queue.METRICS: (Queue.ONLINE_METRICS, Queue.METRICS), Queue.JUDGE: (Queue.ONLINE_JUDGE, Queue.JUDGE)}
# The order a worker takes messages in: online work, then control, then batch work. Control comes before
# the batch queues because the online sampler runs there: behind a planner-filled `metrics` queue it
# would wait until the batch was done (bench/online.py measured p95 29 s from completion to decision).
_SERVED_BEFORE = {Queue.ONLINE_METRICS: 0, Queue.ONLINE_JUDGE: 0, Queue.CONTROL: 1, Queue.METRICS: 2, Queue.JUDGE: 2}


def consumed_queues(names: list[str]) -> list[str]:
    """The queues a worker asked for ``names`` consumes, in the order it serves them: each batch queue's
    online twin first, then ``control``, then the batch queues (in the order given)."""
    expanded: list[Queue] = []
    for name in names:
        for queue in CONSUMED_WITH.get(Queue(name), (Queue(name),)):
            if queue not in expanded:
                expanded.append(queue)
    return [queue.value for queue in sorted(expanded, key=_SERVED_BEFORE.__getitem__)]


def _kombu_queue(queue: Queue) -> KombuQueue:
    # The anonymous exchange routes by queue name with no binding table, so publishing keeps working
    # after Redis restarts empty (a named exchange's bindings would be gone and messages dropped).
    return KombuQueue(queue.value, Exchange("", type="direct"), routing_key=queue.value)


def make_celery() -> Celery:
    settings = get_settings()
    app = Celery("assay", include=["assay.workers.tasks"])
    app.conf.update(
        broker_url=settings.broker_url,
        result_backend=None,
        task_ignore_result=True,
        task_queues=[_kombu_queue(q) for q in Queue],
        task_default_queue=Queue.CONTROL.value,
        task_default_exchange="",
        task_default_routing_key=Queue.CONTROL.value,
        task_create_missing_queues=False,
        # Reliable delivery: ack after the task ran, redeliver if the worker died, take one at a time.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # One visibility timeout, used by the broker and by the result-less redelivery of unacked tasks;
        # longer than any lease and any countdown, so a slow task is not delivered twice.
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_seconds,
            # A worker's BRPOP lists its queues in the order it was given them, and Redis pops from the
            # first non-empty one: online queues, listed first (consumed_queues), are served ahead of
            # batch work. (The default, round_robin, rotates the order after every message.)
            "queue_order_strategy": "priority",
            **({"global_keyprefix": settings.broker_key_prefix} if settings.broker_key_prefix else {}),
        },
        # Survives a kombu crash on broker reconnect (see assay.workers.consumer).
        worker_consumer="assay.workers.consumer:ResilientConsumer",
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # Flower reads these events.
        worker_send_task_events=True,
        task_send_sent_event=True,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        timezone="UTC",
        enable_utc=True,
    )
    from assay.workers.schedule import beat_schedule

    app.conf.beat_schedule = beat_schedule(settings)
    return app


app = make_celery()


@beat_init.connect
def _register_suites_at_beat_start(**_: Any) -> None:
    # Beat, like the API, registers each suite's current criteria when it starts.
    from assay.scoring.store.db import transaction
    from assay.scoring.suites.criteria import register_all_suites

    with transaction() as session:
        register_all_suites(session, get_settings().config_dir)


# Filled by the decorator below; Celery reads routes when it first publishes, after tasks registered.
_routes: dict[str, dict[str, str]] = {}
app.conf.task_routes = _routes


def task(name: str, queue: Queue, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Register a task with an explicit dotted name on a queue, late-acked, with no result stored."""
    _routes[name] = {"queue": queue.value, "exchange": "", "routing_key": queue.value}
    return app.task(
        name=name,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        **options,
    )
