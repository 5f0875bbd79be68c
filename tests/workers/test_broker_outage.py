"""Publishing through a broker outage (a broker that lost its messages: test_broker_identity.py)."""

from __future__ import annotations

import uuid

import kombu.exceptions

from assay.scoring.pipeline.components import ComponentRef
from assay.workers import tasks


class FlakyPublish:
    """``apply_async`` that the broker refuses ``failures`` times (as while Redis restarts), then takes."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.taken: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs) -> None:
        if self.failures:
            self.failures -= 1
            raise kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.taken.append((args, kwargs))


def test_the_planner_re_sends_itself_through_a_broker_outage(monkeypatch):
    publish = FlakyPublish(failures=2)
    monkeypatch.setattr(tasks.plan_batch, "apply_async", publish)
    tasks._plan_later("batch-1", countdown=2.0)
    assert publish.taken == [((), {"args": ("batch-1",), "countdown": 2.0})]


def test_component_messages_are_published_through_a_broker_outage(monkeypatch):
    publish = FlakyPublish(failures=1)
    monkeypatch.setattr(tasks.metric_components, "apply_async", publish)
    ref = ComponentRef(uuid.uuid4(), "schema_match", "metrics")
    tasks.enqueuer.enqueue([ref], countdown=5.0)
    assert len(publish.taken) == 1 and publish.taken[0][1]["args"] == ([[str(ref.score_id), "schema_match"]],)
