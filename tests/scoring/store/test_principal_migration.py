"""Migration 0013 types the principal names stored before: ``key:NAME`` when an API key of the
deployment has that name (``ci-tester`` in the tests' ASSAY_API_KEYS), else ``proxy:NAME``; existing
labels count as written by their annotator; existing API suites get no owner. Downgrading strips the
types again without merging two principals' rows."""

from __future__ import annotations

import uuid

from alembic import command
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from assay.scoring.store.db import alembic_config
from assay.scoring.store.models import Batch, CriteriaDefinition, Item, Label, Review, Score, SuiteRecord
from tests.conftest import API_KEY_NAME

HASH = "c" * 64


def _rows_named(session: Session, *names: str) -> uuid.UUID:
    """A suite, a batch with an Idempotency scope, and per name a label; the first name also reviews.
    Returns the item's id."""
    session.add(CriteriaDefinition(criteria_hash=HASH, criteria_content={"kind": "kql"}))
    session.add(SuiteRecord(name="api_s", kind="kql", current_criteria_hash=HASH, options={}, origin="api", created_by=names[0]))
    session.flush()
    item = Item(kind="kql", payload={}, content_hash="0" * 64)
    session.add(item)
    for name in names:
        session.add(Batch(suite_name="api_s", criteria_hash=HASH, created_by=name, idempotency_key="k", idempotency_scope=name))
    session.flush()
    score = Score(item_id=item.id, suite_name="api_s", criteria_hash=HASH, components_total=1, triggered_by="t")
    session.add(score)
    session.flush()
    session.add(Review(score_id=score.id, item_id=item.id, suite_name="api_s", reviewer=names[0], passed=True))
    for name in names:
        session.add(Label(suite_name="api_s", item_id=item.id, annotator=name, written_by=name, passed=True, source="upload"))
    return item.id


def test_stored_names_become_typed_principals_and_a_downgrade_strips_them(scratch_pg_url):
    cfg = alembic_config(scratch_pg_url)
    command.upgrade(cfg, "0013")
    engine = create_engine(scratch_pg_url)
    try:
        # Rows as a release before 0013 stored them: bare names (written at head, then taken back to 0012).
        with Session(engine) as session, session.begin():
            item_id = _rows_named(session, API_KEY_NAME, "alice")
        command.downgrade(cfg, "0012")
        command.upgrade(cfg, "0013")
        with Session(engine) as session:
            assert sorted(session.scalars(select(Batch.idempotency_scope))) == [f"key:{API_KEY_NAME}", "proxy:alice"]
            assert session.scalars(select(Review.reviewer)).all() == [f"key:{API_KEY_NAME}"]
            labels = session.execute(select(Label.annotator, Label.written_by, Label.source).order_by(Label.annotator)).all()
            assert [tuple(x) for x in labels] == [
                (f"key:{API_KEY_NAME}", f"key:{API_KEY_NAME}", "upload"), ("proxy:alice", "proxy:alice", "upload"),
            ]
            suite = session.get(SuiteRecord, "api_s")
            assert suite.owner is None and suite.created_by == API_KEY_NAME  # only operators change it
            # Attribution columns are not principals' alone (the CLI and beat write them too): left as they were.
            assert sorted(session.scalars(select(Batch.created_by))) == ["alice", API_KEY_NAME]

        # key alice labels the item beside proxy alice; going back, only one of them may be "alice".
        with Session(engine) as session, session.begin():
            session.add(Label(suite_name="api_s", item_id=item_id, annotator="key:alice", written_by="key:alice", passed=False, source="import"))
        command.downgrade(cfg, "0012")
        with engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT annotator, source FROM labels ORDER BY annotator").all()
            assert [tuple(r) for r in rows] == [("alice", "upload"), (API_KEY_NAME, "upload"), ("proxy:alice", "upload")]
            scopes = connection.exec_driver_sql("SELECT idempotency_scope FROM batches ORDER BY 1").all()
            assert [r[0] for r in scopes] == ["alice", API_KEY_NAME]
    finally:
        engine.dispose()
