"""The store's guards: one active score per (item, criteria), CHECK ranges."""


import pytest
from sqlalchemy.exc import IntegrityError

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score, SuiteRecord


def _item_and_hash(session):
    suite = session.get(SuiteRecord, "kql")
    item = Item(kind="kql", payload={}, content_hash="0" * 64)
    session.add(item)
    session.flush()
    return item, suite.current_criteria_hash


def _score(item_id, criteria_hash, **kw):
    base = dict(item_id=item_id, suite_name="kql", criteria_hash=criteria_hash, components_total=4, triggered_by="t")
    base.update(kw)
    return Score(**base)


def test_one_active_score_per_item_and_criteria(clean_db):
    with transaction() as session:
        item, h = _item_and_hash(session)
        session.add(_score(item.id, h, status="completed", total=0.5))
        session.add(_score(item.id, h, status="completed", total=0.7))  # history may repeat
        session.add(_score(item.id, h, status="pending"))
    with pytest.raises(IntegrityError):
        with transaction() as session:
            session.add(_score(item.id, h, status="in_progress"))


@pytest.mark.parametrize(
    "bad",
    [{"total": 1.5, "status": "completed"}, {"total": -0.1, "status": "completed"}, {"status": "weird"}, {"cost_usd": -1.0}],
)
def test_check_constraints_reject_out_of_range(clean_db, bad):
    with transaction() as session:
        item, h = _item_and_hash(session)
        item_id = item.id
    with pytest.raises(IntegrityError):
        with transaction() as session:
            session.add(_score(item_id, h, **bad))
