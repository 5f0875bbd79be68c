"""The worker's consumer survives kombu's crash on closing a broker connection whose transport client
was already dropped (the state a Redis restart leaves behind; see assay.workers.consumer)."""

from __future__ import annotations

import logging
import uuid

import pytest
from celery.worker.consumer import Consumer
from kombu import Connection
from kombu.asynchronous import Hub

from assay.workers.app import app
from assay.workers.consumer import ResilientConsumer, _tolerant_close
from tests.conftest import TEST_ENV


@pytest.fixture
def connection_after_collect():  # type: ignore[no-untyped-def]
    """A connection in the state Celery's collect() leaves after a channel failed to close: the
    default channel open with an unacked delivery, the transport's client gone."""
    conn = Connection(TEST_ENV["ASSAY_BROKER_URL"], transport_options={"global_keyprefix": f"consumer-test-{uuid.uuid4().hex}:"})
    queue = conn.SimpleQueue(f"q-{uuid.uuid4().hex}", channel=conn.default_channel)
    queue.put({"n": 1})
    message = queue.get(timeout=5)  # delivered, not acked: close() will try to restore it
    assert message.payload == {"n": 1}
    conn._do_close_transport()  # what collect() does after its channel close failed
    yield conn
    queue.channel.do_restore = False  # no restore attempt (and crash) at the interpreter's exit


def test_kombu_still_crashes_there(connection_after_collect):  # type: ignore[no-untyped-def]
    # If this stops raising, kombu fixed it and ResilientConsumer can go.
    with pytest.raises(AttributeError, match="hostname"):
        connection_after_collect.close()


def test_the_tolerant_close_logs_and_returns(connection_after_collect, caplog):  # type: ignore[no-untyped-def]
    _tolerant_close(connection_after_collect.close)()
    assert "without restoring unacked messages" in caplog.text


def test_the_worker_uses_the_resilient_consumer() -> None:
    assert app.conf.worker_consumer == "assay.workers.consumer:ResilientConsumer"
    from celery.utils.imports import symbol_by_name

    assert symbol_by_name(app.conf.worker_consumer) is ResilientConsumer


@pytest.fixture
def delivery_on_dropped_connection():  # type: ignore[no-untyped-def]
    """A message delivered on a connection that went away while its task ran: the channel is still
    open (its close failed with Redis down), its pool is gone and the transport's client dropped."""
    conn = Connection(TEST_ENV["ASSAY_BROKER_URL"], transport_options={"global_keyprefix": f"consumer-test-{uuid.uuid4().hex}:"})
    queue = conn.SimpleQueue(f"q-{uuid.uuid4().hex}", channel=conn.default_channel)
    queue.put({"n": 1})
    message = queue.get(timeout=5)
    channel = conn.default_channel
    channel._disconnect_pools()
    conn._do_close_transport()
    yield conn, message
    channel.do_restore = False  # else kombu's exit hook tries to restore the unacked delivery, and prints its crash


def _run_on_a_hub(schedule) -> Hub:  # type: ignore[no-untyped-def]
    """Schedule through a consumer whose hub is real, then run that hub's loop once, as the worker
    does: whatever a scheduled callback raises comes out of ``run_once``."""
    hub = Hub()
    consumer = ResilientConsumer.__new__(ResilientConsumer)  # only call_soon_ack and its hub are used
    consumer.hub = hub
    schedule(consumer)
    try:
        hub.run_once()
    finally:
        hub.close()
    return hub


def test_kombu_still_crashes_acking_there(delivery_on_dropped_connection) -> None:  # type: ignore[no-untyped-def]
    # If this stops raising, kombu fixed it and ResilientConsumer.call_soon_ack can go.
    conn, message = delivery_on_dropped_connection
    with pytest.raises(AttributeError, match="hostname"):
        _run_on_a_hub(lambda consumer: Consumer.call_soon_ack(consumer, message.ack_log_error, logging.getLogger(), conn.connection_errors))


def test_a_late_ack_on_a_dropped_connection_is_logged_not_raised(delivery_on_dropped_connection, caplog) -> None:  # type: ignore[no-untyped-def]
    conn, message = delivery_on_dropped_connection
    _run_on_a_hub(lambda consumer: consumer.call_soon_ack(message.ack_log_error, logging.getLogger(), conn.connection_errors))
    assert "message not acked: its broker connection is gone" in caplog.text


def test_a_late_ack_on_a_live_connection_still_acks() -> None:
    conn = Connection(TEST_ENV["ASSAY_BROKER_URL"], transport_options={"global_keyprefix": f"consumer-test-{uuid.uuid4().hex}:"})
    with conn:
        queue = conn.SimpleQueue(f"q-{uuid.uuid4().hex}", channel=conn.default_channel)
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert not message.acknowledged
        _run_on_a_hub(lambda consumer: consumer.call_soon_ack(message.ack_log_error, logging.getLogger(), conn.connection_errors))
        assert message.acknowledged  # set only once the channel took the ack
