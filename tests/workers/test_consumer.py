"""The worker's consumer survives kombu's crash on closing a broker connection whose transport client
was already dropped (the state a Redis restart leaves behind; see assay.workers.consumer)."""

from __future__ import annotations

import uuid

import pytest
from kombu import Connection

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
