"""The sampler: completed traces become online items and scores, decided once per trace and rule."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from sqlalchemy import select

from assay.scoring.online import otlp
from assay.scoring.online.sampler import sample, sampled
from assay.scoring.online.spans import store_spans
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score, ScoreComponent, utcnow
from assay.scoring.store.online_models import OnlineDecision, OnlineScore
from tests.online.support import SUITE, chat_span, clear_online_tables, export_request, register_online_suite


@pytest.fixture
def store(clean_db):
    clear_online_tables()


def _ingest(spans, service: str = "support-bot", at=None) -> None:
    decoded = otlp.decode_spans(export_request(spans, service), 1 << 20)
    with transaction() as session:
        store_spans(session, decoded.rows, at or utcnow())


def _sample(now=None):
    with transaction() as session:
        return sample(session, now or utcnow(), limit=100)


def test_a_completed_trace_becomes_an_online_score_on_the_online_queue(store):
    register_online_suite()
    trace, root, child = os.urandom(16), os.urandom(8), os.urandom(8)
    _ingest([chat_span(trace, root, answer="No idea."), chat_span(trace, child, root, model="gpt-4o-mini")])
    report = _sample()
    assert report.items == 2 and report.decided == 1
    assert {ref.queue for ref in report.refs} == {"online-metrics"}
    with transaction() as session:
        links = {link.span_id: link for link in session.scalars(select(OnlineScore))}
        assert set(links) == {root.hex(), child.hex()}
        assert {link.slice for link in links.values()} == {"gpt-4o", "gpt-4o-mini"}
        item = session.get(Item, links[child.hex()].item_id)
        assert item.external_id == f"{trace.hex()}/{child.hex()}"
        assert item.payload == {
            "input": "where is my refund?",
            "output": "Your refund is on its way.",
            "metadata": {"model": "gpt-4o-mini"},
        }
        score = session.get(Score, links[child.hex()].score_id)
        assert (score.suite_name, score.status, score.batch_id, score.triggered_by) == (SUITE, "pending", None, "online:chat")
        queues = set(session.scalars(select(ScoreComponent.queue).where(ScoreComponent.score_id == score.id)))
        assert queues == {"online-metrics"}
        decision = session.scalars(select(OnlineDecision)).one()
        assert (decision.decision, decision.items) == ("scored", 2)
    # Decided once: a second run finds nothing to do.
    assert _sample().traces == 0


def test_a_trace_waits_for_its_root_and_its_quiet_window(store):
    register_online_suite(quiet=30)
    trace, root, child = os.urandom(16), os.urandom(8), os.urandom(8)
    _ingest([chat_span(trace, child, root)])
    assert _sample().traces == 0  # no root yet
    _ingest([chat_span(trace, root)])
    assert _sample().traces == 0  # root ended, but spans came less than 30 s ago
    report = _sample(utcnow() + timedelta(seconds=31))
    assert report.items == 2


def test_sampling_is_drawn_from_the_trace_id(store):
    register_online_suite(rate=0.5)
    traces = [os.urandom(16) for _ in range(40)]
    for trace in traces:
        _ingest([chat_span(trace, os.urandom(8))])
    report = _sample()
    expected = sum(sampled(trace.hex(), 0.5) for trace in traces)
    assert 0 < expected < 40  # both outcomes happen in 40 draws (a 2 * 0.5**40 chance otherwise)
    assert report.decisions["scored"] == expected
    assert report.decisions["sampled_out"] == 40 - expected
    assert sampled("0" * 32, 0.01) and not sampled("f" * 32, 0.99)
    assert all(sampled(trace.hex(), 1.0) for trace in traces) and not any(sampled(t.hex(), 0.0) for t in traces)


def test_unmatched_spans_and_other_services_make_nothing(store):
    register_online_suite()
    _ingest([chat_span(os.urandom(16), os.urandom(8))], service="billing")
    report = _sample()
    assert report.decisions == {"no_match": 1} and report.items == 0


def test_the_daily_budget_stops_a_rule(store):
    register_online_suite(extra="      daily_budget: 3\n")
    for _ in range(3):
        trace, root = os.urandom(16), os.urandom(8)
        _ingest([chat_span(trace, root), chat_span(trace, os.urandom(8), root)])
    report = _sample()
    assert report.items == 3  # two from the first trace, one of the second's two, none of the third
    assert report.decisions == {"scored": 2, "over_budget": 1}
    with transaction() as session:
        over = session.scalars(select(OnlineDecision).where(OnlineDecision.decision == "over_budget")).one()
    assert "daily budget of 3" in over.reason


def test_a_per_trace_rule_makes_one_item_of_the_trace(store):
    extra = """    - name: conversation
      per: trace
      quiet_seconds: 0
"""
    register_online_suite(extra=extra)
    trace, root, child = os.urandom(16), os.urandom(8), os.urandom(8)
    _ingest([chat_span(trace, root, question="first", answer="one"), chat_span(trace, child, root, question="second", answer="refund two", start_ns=1_500_000_000)])
    report = _sample()
    assert report.items == 3  # two spans of rule chat, the trace of rule conversation
    with transaction() as session:
        link = session.scalars(select(OnlineScore).where(OnlineScore.rule == "conversation")).one()
        item = session.get(Item, link.item_id)
    assert link.span_id is None and item.external_id == trace.hex()
    # the first matched span's input, the last one's output
    assert (item.payload["input"], item.payload["output"]) == ("first", "refund two")


def test_a_mapping_that_does_not_fit_the_spans_is_decided_invalid(store):
    register_online_suite()
    span = chat_span(os.urandom(16), os.urandom(8))
    del span.attributes[:]
    span.attributes.extend(chat_span(b"", b"").attributes[:2])  # operation and model: no messages
    _ingest([span])
    report = _sample()
    assert report.decisions == {"invalid": 1}
    with transaction() as session:
        decision = session.scalars(select(OnlineDecision)).one()
    assert "input" in decision.reason
