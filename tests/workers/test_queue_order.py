"""The order a worker serves its queues in, on the real Redis broker with the app's transport options:
online work first, then control (where the online sampler runs), then batch work, whatever order the
messages were published in."""

from __future__ import annotations

import pytest
from kombu import Consumer, Producer

from assay.workers.app import Queue, _kombu_queue, app, consumed_queues


@pytest.mark.parametrize(
    "asked, served",
    [
        (["metrics", "control"], ["online-metrics", "control", "metrics"]),
        (["control", "metrics"], ["online-metrics", "control", "metrics"]),
        (["judge"], ["online-judge", "judge"]),
        (["metrics", "judge", "control"], ["online-metrics", "online-judge", "control", "metrics", "judge"]),
        (["control"], ["control"]),
    ],
)
def test_consumed_queues_puts_online_then_control_before_batch_queues(asked, served):
    assert consumed_queues(asked) == served


def test_a_metrics_and_control_worker_takes_online_then_control_then_batch_messages():
    queues = [_kombu_queue(Queue(name)) for name in consumed_queues(["metrics", "control"])]
    taken: list[str] = []
    with app.connection_for_write() as conn:
        channel = conn.channel()
        for queue in queues:
            queue(channel).declare()
            queue(channel).purge()  # this run's key namespace: only what an earlier test left
        producer = Producer(channel)
        # Batch work first, then the sampler's tick, then online work: served the other way round.
        for name in ("metrics", "metrics", "control", "online-metrics", "metrics"):
            producer.publish({"queue": name}, routing_key=name)

        def on_message(body, message):  # type: ignore[no-untyped-def]
            taken.append(body["queue"])
            message.ack()

        with Consumer(channel, queues=queues, callbacks=[on_message], prefetch_count=1):
            while len(taken) < 5:
                conn.drain_events(timeout=10)
    assert taken == ["online-metrics", "control", "metrics", "metrics", "metrics"]
