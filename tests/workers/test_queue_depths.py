"""The planner's backpressure reads the real queue lengths, under a broker key prefix too (kombu's
passive queue_declare looks for the unprefixed key and reports every queue empty)."""

from __future__ import annotations

import uuid

from assay.scoring.pipeline import ComponentRef
from assay.settings import get_settings
from assay.workers.app import app
from assay.workers.tasks import enqueuer, queue_depths


def test_queue_depths_count_messages_under_the_key_prefix(clean_db):
    assert get_settings().broker_key_prefix, "the tests run under a broker key prefix"
    before = queue_depths()
    assert before is not None
    refs = [ComponentRef(uuid.uuid4(), "schema_match", "metrics") for _ in range(7)]
    enqueuer.enqueue(refs)
    try:
        after = queue_depths()
        assert after is not None and after["metrics"] == before["metrics"] + 7
        assert after["judge"] == before["judge"]
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("metrics")
    assert queue_depths()["metrics"] == 0
