"""Online items and re-scoring: the nightly run leaves them out unless their rule says ``rescore: true``;
a manual run takes them like any other item."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import select

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.online import otlp
from assay.scoring.online.sampler import sample
from assay.scoring.online.spans import store_spans
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.landing import land
from assay.scoring.rescoring import rescore
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score, utcnow
from assay.scoring.store.online_models import OnlineScore
from assay.scoring.suites.criteria import current_suite
from tests.online.support import SUITE, chat_span, clear_online_tables, export_request, register_online_suite

AUDITED = """    - name: audited
      match: {service: support-bot}
      per: trace
      quiet_seconds: 0
      rescore: true
"""


@pytest.fixture
def scored_online(clean_db):
    """Three traces scored online and finished: each makes a `chat` item (rescore: false) and an
    `audited` item (rescore: true). Returns the item ids by rule."""
    clear_online_tables()
    register_online_suite(extra=AUDITED)
    spans = [chat_span(os.urandom(16), os.urandom(8)) for _ in range(3)]
    decoded = otlp.decode_spans(export_request(spans), 1 << 20)
    with transaction() as session:
        store_spans(session, decoded.rows, utcnow())
    with transaction() as session:
        refs = sample(session, utcnow(), limit=100).refs
    for ref in refs:
        with transaction() as session:
            assert claim(session, ref, "w", 60).state == "claimed"
        with transaction() as session:
            land(session, ref, ComponentResult.ok(1.0))
    with transaction() as session:
        rows = session.execute(select(OnlineScore.rule, OnlineScore.item_id)).all()
        assert set(session.scalars(select(Score.status))) == {"completed"}
    by_rule: dict[str, set] = {"chat": set(), "audited": set()}
    for rule, item_id in rows:
        by_rule[rule].add(item_id)
    assert (len(by_rule["chat"]), len(by_rule["audited"])) == (3, 3)
    return by_rule


def _candidates(selection: rescore.Selection) -> set:
    with transaction() as session:
        record = current_suite(session, SUITE)
        return set(session.scalars(select(Item.id).where(rescore.candidates(record, selection))))


def _new_criteria() -> None:
    """The suite's criteria change (its metric looks for another word): every score is stale."""
    register_online_suite(extra=AUDITED, value="ticket")


def test_nothing_is_stale_under_the_criteria_that_scored_it(scored_online):
    assert _candidates(rescore.Selection(nightly=True)) == set()


def test_the_nightly_run_takes_only_the_items_of_rules_that_ask_for_it(scored_online):
    _new_criteria()
    assert _candidates(rescore.Selection(nightly=True)) == scored_online["audited"]
    # A manual run (assay rescore, POST /api/v1/rescore) takes them all.
    assert _candidates(rescore.Selection()) == scored_online["audited"] | scored_online["chat"]

    from assay.workers.tasks import rescore_stale

    runs = rescore_stale.apply().get()
    assert runs[SUITE]["scores"] == 3
    with transaction() as session:
        rescored = set(session.scalars(select(Score.item_id).where(Score.triggered_by == "schedule", Score.suite_name == SUITE)))
    assert rescored == scored_online["audited"]


def test_without_a_rule_asking_the_nightly_run_takes_no_online_item(scored_online):
    register_online_suite(extra=AUDITED.replace("rescore: true", "rescore: false"), value="ticket")
    assert _candidates(rescore.Selection(nightly=True)) == set()
    assert len(_candidates(rescore.Selection())) == 6
