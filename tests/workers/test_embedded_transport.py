"""The embedded mode's in-memory broker is event-driven: a consumer that finds nothing it may take waits
for a publish or a freed prefetch slot, and never sleeps a polling interval (kombu's memory transport
sleeps 1 s there, which left an embedded run idle between tasks)."""

from __future__ import annotations

import threading
import uuid

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.transport.virtual import base

from assay.workers.embedded import WakingMemoryTransport


@pytest.fixture
def polling_sleeps(monkeypatch):
    """Every polling sleep kombu's virtual transports take (they take them through ``base.sleep``)."""
    sleeps: list[float] = []
    real_sleep = base.sleep

    def recorded(seconds: float) -> None:
        sleeps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(base, "sleep", recorded)
    return sleeps


def _queue() -> Queue:
    name = f"wake-{uuid.uuid4().hex[:8]}"
    return Queue(name, Exchange("", type="direct"), routing_key=name)


def _publish_later(queue: Queue, body: str, delay: float = 0.2) -> threading.Timer:
    def publish() -> None:
        with Connection("memory://", transport=WakingMemoryTransport) as conn:
            Producer(conn.default_channel).publish(body, exchange="", routing_key=queue.routing_key, declare=[queue])

    timer = threading.Timer(delay, publish)
    timer.start()
    return timer


def test_a_waiting_consumer_is_woken_by_a_publish(polling_sleeps):
    queue = _queue()
    received: list[str] = []
    with (
        Connection("memory://", transport=WakingMemoryTransport) as conn,
        Consumer(conn, [queue], callbacks=[lambda body, message: (received.append(body), message.ack())]),
    ):
        timer = _publish_later(queue, "first")
        conn.drain_events(timeout=30)
        timer.join()
    assert received == ["first"]
    assert polling_sleeps == []


def test_a_consumer_whose_slots_are_taken_is_woken_by_an_ack(polling_sleeps):
    # Prefetch 1, one message held unacknowledged (a running task): the next message waits in the
    # queue until the ack frees the slot, and is taken then.
    queue = _queue()
    held: list = []
    received: list[str] = []
    with Connection("memory://", transport=WakingMemoryTransport) as conn:
        channel = conn.default_channel

        def on_message(body, message):  # type: ignore[no-untyped-def]
            received.append(body)
            held.append(message)

        with Consumer(channel, [queue], callbacks=[on_message], prefetch_count=1):
            _publish_later(queue, "first", delay=0).join()
            _publish_later(queue, "second", delay=0).join()
            conn.drain_events(timeout=30)
            assert received == ["first"]
            acker = threading.Timer(0.2, lambda: held[0].ack())
            acker.start()
            conn.drain_events(timeout=30)  # nothing it may take: waits for the ack, then takes "second"
            acker.join()
    assert received == ["first", "second"]
    assert polling_sleeps == []


def test_a_wake_up_with_nothing_to_take_returns_as_a_timeout(polling_sleeps):
    # The worker's loop needs control back between waits (to see a shutdown): a wake-up that brought
    # nothing for this consumer ends the call as a timeout, as a poll did.
    queue, other = _queue(), _queue()
    with (
        Connection("memory://", transport=WakingMemoryTransport) as conn,
        Consumer(conn, [queue], callbacks=[lambda body, message: message.ack()]),
    ):
        timer = _publish_later(other, "not for this consumer")
        with pytest.raises(TimeoutError):
            conn.drain_events(timeout=30)
        timer.join()
    assert polling_sleeps == []
