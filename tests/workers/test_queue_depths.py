"""The planner's backpressure reads the real queue lengths, under a broker key prefix too (kombu's
passive queue_declare looks for the unprefixed key and reports every queue empty)."""

from __future__ import annotations

import uuid

from assay.scoring.pipeline.components import ComponentRef
from assay.settings import get_settings, judge_task_threads
from assay.workers.app import app
from assay.workers.tasks import enqueuer, queue_depths


def test_queue_depths_count_messages_under_the_key_prefix(clean_db):
    assert get_settings().broker_key_prefix, "the tests run under a broker key prefix"
    before = queue_depths()
    assert before is not None
    # Metric components travel metric_group_size scores per message: 2.5 groups' worth is 3 messages.
    refs = [ComponentRef(uuid.uuid4(), "schema_match", "metrics") for _ in range(get_settings().metric_group_size * 5 // 2)]
    enqueuer.enqueue(refs)
    try:
        after = queue_depths()
        assert after is not None and after["metrics"] == before["metrics"] + 3
        assert after["judge"] == before["judge"]
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("metrics")
    assert queue_depths()["metrics"] == 0


def test_judge_components_travel_in_groups_of_the_group_size(clean_db):
    assert get_settings().judge_group_size == 8
    before = queue_depths()["judge"]
    try:
        enqueuer.enqueue([ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(40)])
        assert queue_depths()["judge"] == before + 5  # 40 in messages of 8
        enqueuer.enqueue([ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(3)])
        assert queue_depths()["judge"] == before + 5 + 1  # a small publish: one message, its calls made at once
        enqueuer.enqueue([ComponentRef(uuid.uuid4(), "schema_match", "metrics") for _ in range(3)])
        assert queue_depths()["judge"] == before + 5 + 1  # metric components: in their own messages, elsewhere
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("judge")
            conn.default_channel.queue_purge("metrics")


def test_a_judge_worker_runs_enough_task_threads_to_keep_its_call_threads_busy():
    assert judge_task_threads(16, 8) == 3  # two groups fill the call threads; a third waits ready
    assert judge_task_threads(17, 8) == 4  # rounded up: never fewer calls in flight than asked
    assert judge_task_threads(4, 8) == 2
    assert judge_task_threads(5, 1) == 6
