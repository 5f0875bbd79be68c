"""Prometheus for any kind: a generic suite's scores count under its suite, its judge calls under the
model; every label is drawn from a bounded set (suite and component names, never item data); the
live collector reads the breaker through the callable the API passes (observability imports no judge)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from prometheus_client import Counter, Histogram

from assay import observability
from tests.api.test_metrics import total
from tests.conftest import API_KEY
from tests.dashboard.support import judge_runtime, make_app, score_in_process
from tests.fakes.anthropic_server import FakeAnthropic

# Label names whose values are bounded: suite and component names come from registered suites, the
# rest from fixed vocabularies or the model catalog.
# provider: one value per provider configured in models.yaml (observability.route_provider).
BOUNDED_LABELS = {"suite", "outcome", "queue", "component", "status", "reason", "provider", "model", "type"}

SUITE = """
name: metrics_generic
kind: generic
threshold: 0.5
components:
  exact:
    weight: 0.4
    metric: exact_match
    version: 1
  correctness:
    weight: 0.3
    judge:
      rubric: Grade the answer.
      verdict: {type: pass_fail}
  tone:
    weight: 0.3
    judge:
      rubric: Grade the tone.
      verdict: {type: labels, labels: {good: 1.0, bad: 0.0}}
"""


def test_every_metric_has_only_bounded_labels():
    metrics = [v for v in vars(observability).values() if isinstance(v, (Counter, Histogram))]
    assert len(metrics) >= 10
    for metric in metrics:
        assert set(metric._labelnames) <= BOUNDED_LABELS, (metric._name, metric._labelnames)


def test_live_collector_reads_the_breaker_only_through_its_callable(clean_db):
    from assay.settings import get_settings

    def broken() -> list[dict]:
        raise RuntimeError("breaker store down")

    def gauges(collector: observability.LiveCollector) -> dict[str, list]:
        return {family.name: family.samples for family in collector.collect()}

    settings = get_settings()
    without = gauges(observability.LiveCollector(settings))
    assert "assay_judge_breaker_state" not in without
    assert {s.labels["source"] for s in without["assay_metrics_source_up"]} == {"broker"}

    down = gauges(observability.LiveCollector(settings, broken))
    up = {s.labels["source"]: s.value for s in down["assay_metrics_source_up"]}
    assert up == {"broker": 1, "breaker": 0}

    rows = [{"model": "m1", "state": "open", "failures": 3}, {"model": "openai@api.openai.com:gpt-5", "state": "closed", "failures": 0}]
    live = gauges(observability.LiveCollector(settings, lambda: rows))
    states = {(s.labels["provider"], s.labels["model"], s.labels["state"]): s.value for s in live["assay_judge_breaker_state"]}
    assert states[("anthropic", "m1", "open")] == 1 and states[("anthropic", "m1", "closed")] == 0
    assert states[("openai", "openai@api.openai.com:gpt-5", "closed")] == 1


@pytest.fixture
def client(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


def test_a_generic_suites_scores_and_judge_calls_are_counted(client):
    r = client.post("/api/v1/suites", content=SUITE.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    items = [{"id": f"m{n}", "input": "q", "output": "a", "expected": "a"} for n in range(3)]
    before = client.get("/metrics").text
    r = client.post(
        "/api/v1/batches?suite=metrics_generic",
        content="\n".join(json.dumps(i) for i in items).encode(),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 202, r.text
    with FakeAnthropic() as fake:
        score_in_process(r.json()["batch_id"], judge_runtime(fake.base_url))
    after = client.get("/metrics").text

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("assay_items_scored_total", suite="metrics_generic") == 3
    assert grew("assay_judge_judgments_total", outcome="verdict") == 6  # two judge components per item
    assert grew("assay_judge_requests_total", outcome="ok") == 6
