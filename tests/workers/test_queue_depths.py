"""The planner's backpressure reads the real queue lengths, under a broker key prefix too (kombu's
passive queue_declare looks for the unprefixed key and reports every queue empty)."""

from __future__ import annotations

import uuid

from assay.scoring.pipeline import ComponentRef
from assay.settings import get_settings
from assay.workers.app import app
from assay.workers.tasks import enqueuer, judge_groups, queue_depths


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


def test_judge_components_travel_in_groups_but_a_small_publish_is_spread(clean_db):
    assert get_settings().judge_concurrency == 4 and get_settings().judge_group_size == 8
    before = queue_depths()["judge"]
    try:
        enqueuer.enqueue([ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(40)])
        assert queue_depths()["judge"] == before + 5  # 40 in messages of 8
        enqueuer.enqueue([ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(3)])
        assert queue_depths()["judge"] == before + 5 + 3  # fewer than the threads: one each
        enqueuer.enqueue([ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(40)], last=True)
        assert queue_depths()["judge"] == before + 5 + 3 + 40  # a batch's last chunk: one each
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("judge")


def test_judge_groups_sizes():
    refs = [ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(20)]
    assert [len(g) for g in judge_groups(refs, most=8, spread=4)] == [5, 5, 5, 5]
    assert [len(g) for g in judge_groups(refs, most=3, spread=4)] == [3] * 6 + [2]
    assert [len(g) for g in judge_groups(refs[:3], most=8, spread=4)] == [1, 1, 1]
    assert [len(g) for g in judge_groups(refs, most=1, spread=1)] == [1] * 20
    assert sum(judge_groups(refs, most=8, spread=3), []) == refs  # every ref once, in order
    assert judge_groups([], most=8, spread=4) == []
