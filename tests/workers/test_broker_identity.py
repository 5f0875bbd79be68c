"""A new broker told apart from one restarted empty, on the real Redis: the reconciler re-sends what
went to a broker that lost it, and nothing that a broker it has not seen before already holds.

"Restarted empty" deletes every key of this run's namespace, which is what the reconciler and the
workers see of a Redis that came back without its data (the fault tests restart a real server)."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy import delete, func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import BrokerEpoch, ScoreComponent
from assay.settings import get_settings
from assay.workers import tasks
from assay.workers.broker_identity import BROKER_IDENTITY_KEY, broker_identity
from tests.scoring.test_pipeline import make_batch

ITEMS = 40


def _broker() -> redis.Redis:
    return redis.Redis.from_url(get_settings().broker_url)


def _empty_the_broker() -> None:
    """Every key of this run's broker namespace gone: its messages, its identity."""
    client = _broker()
    keys = list(client.scan_iter(match=f"{get_settings().broker_key_prefix}*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def new_store_and_broker(clean_db):
    """A store that has seen no broker, and a broker with nothing in it: a first start."""
    with transaction() as s:
        s.execute(delete(BrokerEpoch))
    _empty_the_broker()
    yield
    _empty_the_broker()


def _pending() -> int:
    with transaction() as s:
        return s.scalar(select(func.count()).select_from(ScoreComponent).where(ScoreComponent.status == "pending"))


def _plan(batch_id, chunks: int = 1000) -> None:
    tasks.plan_batch(str(batch_id), chunks_per_run=chunks)


def test_a_first_start_re_sends_nothing_the_planner_queued(new_store_and_broker, monkeypatch):
    monkeypatch.setattr(get_settings(), "plan_chunk_size", 7)
    batch_id, _ = make_batch(ITEMS)
    _plan(batch_id)
    assert _pending() >= ITEMS  # queued, none of it run: no worker in this test
    assert tasks.reconcile()["requeued"] == 0
    with transaction() as s:
        assert s.scalar(select(BrokerEpoch.holds_since)) is None  # the first broker holds everything


def test_a_reconciler_before_the_planner_on_a_first_start_re_sends_nothing(new_store_and_broker):
    assert tasks.reconcile()["requeued"] == 0
    batch_id, _ = make_batch(ITEMS)
    _plan(batch_id)
    assert tasks.reconcile()["requeued"] == 0


def test_a_broker_restarted_empty_gets_exactly_the_pending_work_once(new_store_and_broker):
    batch_id, _ = make_batch(ITEMS)
    _plan(batch_id)
    assert tasks.reconcile()["requeued"] == 0
    pending = _pending()
    _empty_the_broker()
    assert tasks.reconcile()["requeued"] == pending
    assert tasks.reconcile()["requeued"] == 0  # re-sent once: stamped into the new broker
    with transaction() as s:
        assert s.scalar(select(func.count()).select_from(BrokerEpoch)) == 2


def test_a_new_broker_keeps_what_the_planner_sent_it_and_gets_what_the_old_one_had(new_store_and_broker, monkeypatch):
    """A Redis replaced by a new one (or restarted empty) while a batch is half planned: the half sent
    to the old broker is re-sent, the half the planner has sent to the new one since is not."""
    monkeypatch.setattr(get_settings(), "plan_chunk_size", 5)
    batch_id, _ = make_batch(ITEMS)
    _plan(batch_id, chunks=2)  # 10 scores' components to the old broker
    assert tasks.reconcile()["requeued"] == 0
    sent_to_old = _pending()
    assert 0 < sent_to_old
    _empty_the_broker()
    _plan(batch_id)  # the rest, to the new broker, before the reconciler's next pass
    assert _pending() > sent_to_old
    assert tasks.reconcile()["requeued"] == sent_to_old


def test_a_broker_restarted_empty_before_the_reconcilers_first_pass_gets_what_the_old_one_had(
    new_store_and_broker, monkeypatch
):
    """The planner met the first broker, and it lost its messages before the reconciler ever ran: the
    reconciler's first pass must not take the new broker for the first one (which holds everything)."""
    monkeypatch.setattr(get_settings(), "plan_chunk_size", 5)
    batch_id, _ = make_batch(ITEMS)
    _plan(batch_id, chunks=2)
    sent_to_old = _pending()
    assert 0 < sent_to_old
    _empty_the_broker()
    _plan(batch_id)
    assert _pending() > sent_to_old
    assert tasks.reconcile()["requeued"] == sent_to_old
    assert tasks.reconcile()["requeued"] == 0


def test_an_identity_from_before_identities_is_the_first_broker(new_store_and_broker):
    """An upgraded deployment's broker still holds the old marker ("1"): it lost nothing."""
    settings = get_settings()
    _broker().set(f"{settings.broker_key_prefix}{BROKER_IDENTITY_KEY}", "1")
    batch_id, _ = make_batch(ITEMS)
    _plan(batch_id)
    assert tasks.reconcile()["requeued"] == 0
    identity = broker_identity()
    assert identity is not None and identity.name == "1" and identity.created_at is None


def test_no_identity_when_the_broker_cannot_be_reached(monkeypatch):
    monkeypatch.setattr(get_settings(), "broker_url", "redis://127.0.0.1:1/0")
    assert broker_identity() is None
