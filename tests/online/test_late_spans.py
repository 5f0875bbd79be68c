"""Spans that arrive after their trace was decided (docs/online.md, "Late spans"): they re-open the
trace; per-span rules score them once the trace is quiet again, per-trace rules keep their item and the
trace counts what it missed; a trace sampled out stays out."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from sqlalchemy import select

from assay.scoring.online import otlp
from assay.scoring.online.sampler import sample
from assay.scoring.online.spans import store_spans
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, utcnow
from assay.scoring.store.online_models import OnlineDecision, OnlineScore, OnlineTrace
from tests.online.support import chat_span, clear_online_tables, export_request, register_online_suite

QUIET = 5
PER_TRACE = """    - name: conversation
      per: trace
      quiet_seconds: 5
"""


@pytest.fixture
def store(clean_db):
    clear_online_tables()


def _ingest(spans, at, service: str = "support-bot") -> None:
    decoded = otlp.decode_spans(export_request(spans, service), 1 << 20)
    with transaction() as session:
        store_spans(session, decoded.rows, at)


def _sample(now):
    with transaction() as session:
        return sample(session, now, limit=100)


def _trace(trace_id: bytes) -> OnlineTrace:
    with transaction() as session:
        row = session.get(OnlineTrace, trace_id.hex())
        session.expunge(row)
        return row


def _links(rule: str) -> dict[str | None, OnlineScore]:
    with transaction() as session:
        links = session.scalars(select(OnlineScore).where(OnlineScore.rule == rule)).all()
        for link in links:
            session.expunge(link)
    return {link.span_id: link for link in links}


def _decision(rule: str) -> tuple[str, int, str | None]:
    with transaction() as session:
        row = session.scalars(select(OnlineDecision).where(OnlineDecision.rule == rule)).one()
        return row.decision, row.items, row.reason


def test_a_late_span_reopens_its_trace_and_a_per_span_rule_scores_it_once_quiet(store):
    register_online_suite(quiet=QUIET, extra=PER_TRACE)
    t0 = utcnow()
    trace, root, first, late = os.urandom(16), os.urandom(8), os.urandom(8), os.urandom(8)
    _ingest([chat_span(trace, root), chat_span(trace, first, root)], t0)
    report = _sample(t0 + timedelta(seconds=QUIET + 1))
    assert report.items == 3 and report.decided == 1  # two spans for rule chat, the trace for conversation
    assert _trace(trace).decided and _trace(trace).late_spans == 0

    _ingest([chat_span(trace, late, root, answer="A refund, late.", model="gpt-4o-mini")], t0 + timedelta(seconds=10))
    reopened = _trace(trace)
    assert (reopened.decided, reopened.late_spans, reopened.span_count) == (False, 1, 3)
    # Not before the trace is quiet again: the late span's arrival restarted the quiet window.
    assert _sample(t0 + timedelta(seconds=10 + QUIET - 1)).items == 0

    report = _sample(t0 + timedelta(seconds=10 + QUIET + 1))
    assert (report.items, report.decisions["late"], len(report.refs)) == (1, 1, 1)
    links = _links("chat")
    assert set(links) == {root.hex(), first.hex(), late.hex()}
    assert links[late.hex()].slice == "gpt-4o-mini"
    with transaction() as session:
        item = session.get(Item, links[late.hex()].item_id)
        assert item.payload["output"] == "A refund, late." and item.external_id == f"{trace.hex()}/{late.hex()}"
    assert _decision("chat") == ("scored", 3, None)
    # The per-trace rule keeps the item it made of the trace as it was; the trace says what it missed.
    assert list(_links("conversation")) == [None]
    assert _decision("conversation") == ("scored", 1, None)
    assert _trace(trace).decided and _trace(trace).late_spans == 1
    assert _sample(t0 + timedelta(seconds=60)).traces == 0


def test_an_exporter_resending_a_scored_span_after_the_decision_scores_nothing_twice(store):
    register_online_suite(quiet=QUIET)
    t0 = utcnow()
    trace, root = os.urandom(16), os.urandom(8)
    _ingest([chat_span(trace, root)], t0)
    assert _sample(t0 + timedelta(seconds=QUIET + 1)).items == 1
    _ingest([chat_span(trace, root)], t0 + timedelta(seconds=10))  # a retry: the same span again
    assert _trace(trace).late_spans == 1
    report = _sample(t0 + timedelta(seconds=10 + QUIET + 1))
    assert (report.traces, report.items, report.decided) == (1, 0, 1)
    assert list(_links("chat")) == [root.hex()]


def test_a_trace_that_matched_nothing_is_scored_when_a_matching_span_comes_late(store):
    register_online_suite(quiet=QUIET)
    t0 = utcnow()
    trace, root, chat = os.urandom(16), os.urandom(8), os.urandom(8)
    plain = chat_span(trace, root)
    del plain.attributes[:]  # the application's root span: no GenAI attributes
    _ingest([plain], t0)
    assert _sample(t0 + timedelta(seconds=QUIET + 1)).decisions == {"no_match": 1}
    _ingest([chat_span(trace, chat, root)], t0 + timedelta(seconds=10))
    report = _sample(t0 + timedelta(seconds=10 + QUIET + 1))
    assert report.items == 1 and report.decisions["late"] == 1
    assert _decision("chat") == ("scored", 1, None)
    assert list(_links("chat")) == [chat.hex()]


def test_a_trace_sampled_out_stays_out_when_spans_come_late(store):
    register_online_suite(quiet=QUIET, rate=0.0)
    t0 = utcnow()
    trace, root = os.urandom(16), os.urandom(8)
    _ingest([chat_span(trace, root)], t0)
    assert _sample(t0 + timedelta(seconds=QUIET + 1)).decisions == {"sampled_out": 1}
    _ingest([chat_span(trace, os.urandom(8), root)], t0 + timedelta(seconds=10))
    report = _sample(t0 + timedelta(seconds=10 + QUIET + 1))
    assert (report.traces, report.items, report.decided) == (1, 0, 1)
    assert _decision("chat") == ("sampled_out", 0, None)
    assert _trace(trace).late_spans == 1


def test_late_spans_over_the_daily_budget_are_not_scored_and_say_why(store):
    register_online_suite(quiet=QUIET, extra="      daily_budget: 1\n")
    t0 = utcnow().replace(hour=12, minute=0)  # both runs on one UTC day: one budget
    trace, root = os.urandom(16), os.urandom(8)
    _ingest([chat_span(trace, root)], t0)
    assert _sample(t0 + timedelta(seconds=QUIET + 1)).items == 1
    _ingest([chat_span(trace, os.urandom(8), root)], t0 + timedelta(seconds=10))
    assert _sample(t0 + timedelta(seconds=10 + QUIET + 1)).items == 0
    decision, items, reason = _decision("chat")
    assert (decision, items) == ("scored", 1)
    assert reason.startswith("late span(s): the rule made its daily budget of 1")
