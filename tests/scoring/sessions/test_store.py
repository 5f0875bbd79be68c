"""Sessions as items (updates and versions), the feedback rows written with the score, the view."""

from __future__ import annotations

import pytest

from tests.scoring.sessions.helpers import skip_unless_core_ready

skip_unless_core_ready()  # first: the imports below register the session tables

import uuid
from datetime import UTC, datetime

from sqlalchemy import create_engine, delete, func, select
from sqlalchemy.orm import Session

from assay.scoring.sessions.items import AlertSessionItem
from assay.scoring.sessions import service as svc
from assay.scoring.sessions import store
from assay.scoring.store.db import migrate, transaction
from assay.scoring.store.models import CriteriaDefinition, Item, Score, ScoreComponent
from assay.scoring.store.session_models import (
    AlternativeApproachRow,
    AlternativeApproachStepRow,
    MissingToolRow,
    session_scores,
)
from assay.scoring.suites.criteria import current_suite
from tests.scoring.sessions.helpers import VERDICT, make_session, run_refs


def put(raw: dict) -> store.Stored:
    with transaction() as session:
        return store.store_session(session, AlertSessionItem.model_validate(raw))


def score(session_id: str, *, force: bool = False, by: str = "tester") -> svc.ScoreRequest:
    with transaction() as session:
        outcome = svc.request_score(session, session_id, force=force, triggered_by=by)
    run_refs(outcome.refs)
    return outcome


def test_posting_again_updates_in_place_until_scored_then_versions(clean_db, stub_judge):
    first = put(make_session("s1", status="in_progress"))
    assert first.outcome == "created"
    assert put(make_session("s1", status="in_progress")).outcome == "unchanged"
    updated = put(make_session("s1"))
    assert updated.outcome == "updated" and updated.item.id == first.item.id  # nothing judged the old content
    assert updated.item.content_hash != first.item.content_hash
    score("s1")
    versioned = put(make_session("s1", final_analysis="Corrected analysis."))
    assert versioned.outcome == "versioned" and versioned.item.id != first.item.id
    with transaction() as session:
        assert store.current_item(session, "s1").id == versioned.item.id
        old = session.get(Item, first.item.id)
        assert old.payload["final_analysis"] != "Corrected analysis."  # the scored content is never rewritten
        latest = store.latest_score(session, "s1")
        assert latest.item_id == first.item.id  # the latest score still names what it judged
        assert session.scalar(select(func.count()).select_from(store.session_items("s1").subquery())) == 2


def test_feedback_rows_are_written_with_the_score_in_order(clean_db, stub_judge):
    put(make_session("s1"))
    outcome = score("s1")
    with transaction() as session:
        sc = session.get(Score, outcome.score_id)
        assert sc.status == "completed" and sc.total == pytest.approx(0.67) and sc.triggered_by == "tester"
        tools = session.scalars(select(MissingToolRow).where(MissingToolRow.score_id == sc.id).order_by(MissingToolRow.position)).all()
        assert [(t.position, t.tool_name, t.normalized_name) for t in tools] == [
            (1, "list-processes-in-pod", "list-processes-in-pod"),
            (2, "read-file", "read-file"),
        ]
        feedback = store.feedback_for(session, [sc.id])[sc.id]
        assert feedback.missing_tools == VERDICT["missing_tools"]
        assert feedback.alternative_approaches == VERDICT["alternative_approaches"]
        judge = session.get(ScoreComponent, (sc.id, "judge"))
        assert judge.details["session_facts"]["tool_calls"] == 3
        assert judge.details["judge_input"]["truncated"] is False
        assert judge.details["score_breakdown"] == VERDICT["score_breakdown"]


def test_a_failed_score_writes_no_feedback_and_deleting_a_score_cascades(clean_db, stub_judge):
    put(make_session("s1"))
    stub_judge.answers.append("unusable answer after one repair attempt: the answer is not JSON")
    failed = score("s1")
    with transaction() as session:
        sc = session.get(Score, failed.score_id)
        assert sc.status == "failed" and "judge: unusable answer" in sc.error_message
        assert session.scalar(select(func.count()).select_from(MissingToolRow)) == 0
    done = score("s1", force=True)
    with transaction() as session:
        assert session.scalar(select(func.count()).select_from(AlternativeApproachStepRow)) == 4
        session.execute(delete(Score).where(Score.id == done.score_id))
    with transaction() as session:
        for model in (MissingToolRow, AlternativeApproachRow, AlternativeApproachStepRow):
            assert session.scalar(select(func.count()).select_from(model)) == 0


def test_the_hook_runs_in_the_finalizing_transaction(clean_db, stub_judge, monkeypatch):
    """If writing the rows fails, the landing rolls back: no completed score without its feedback."""
    put(make_session("s1"))
    with transaction() as session:
        outcome = svc.request_score(session, "s1", force=False, triggered_by="t")

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "write_feedback", boom)
    with pytest.raises(RuntimeError):
        run_refs(outcome.refs)
    with transaction() as session:
        sc = session.get(Score, outcome.score_id)
        assert sc.status == "in_progress" and sc.components_landed == 0  # left for the reconciler


def test_session_scores_view_on_postgres(clean_db, stub_judge):
    put(make_session("s1"))
    first = score("s1", by="alice@example.com")
    stub_judge.answers.append({**VERDICT, "total_score": 90})
    second = score("s1", force=True, by="bob")
    with transaction() as session:
        rows = session.execute(select(session_scores).order_by(session_scores.c.scored_at)).all()
    assert [r.score_id for r in rows] == [first.score_id, second.score_id]  # history kept
    assert [r.total_score for r in rows] == [67, 90]
    assert rows[0].session_id == "s1" and rows[0].scored_triggered_by == "alice@example.com"
    assert rows[0].score_breakdown == VERDICT["score_breakdown"] and rows[0].score_reasoning == VERDICT["score_reasoning"]
    assert rows[0].scored_at is not None and len(rows[0].criteria_hash) == 64


def test_session_scores_view_on_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'v.db'}"
    migrate(url)
    engine = create_engine(url)
    now = datetime(2025, 12, 5, 10, 30, tzinfo=UTC)
    with Session(engine) as session, session.begin():
        session.add(CriteriaDefinition(criteria_hash="a" * 64, criteria_content={}, created_at=now))
        item = Item(id=uuid.uuid4(), kind="alert_session", external_id="s1", payload={}, content_hash="c" * 64, created_at=now)
        session.add(item)
        session.flush()
        for total, status in ((0.675, "completed"), (0.5, "failed")):
            sid = uuid.uuid4()
            session.add(Score(id=sid, item_id=item.id, suite_name="alert_session", criteria_hash="a" * 64, status=status,
                              total=total if status == "completed" else None, partial=False, components_total=1,
                              components_landed=1, cost_usd=0.0, triggered_by="alice", created_at=now, completed_at=now))
            session.flush()
            session.add(ScoreComponent(score_id=sid, component="judge", queue="judge", status="ok", weight=1.0, attempts=1,
                                       cost_usd=0.0, details={"score_breakdown": {"logical_flow": 20}, "score_reasoning": "why"}))
    with Session(engine) as session:
        rows = session.execute(select(session_scores)).all()
    engine.dispose()
    assert len(rows) == 1  # completed scores only
    row = rows[0]
    assert row.total_score == 68 and row.session_id == "s1" and row.scored_triggered_by == "alice"  # 67.5 rounds up
    assert row.score_reasoning == "why"
    assert row.score_breakdown in ({"logical_flow": 20}, '{"logical_flow":20}')


def test_percent_rounds_like_the_view():
    assert [store.percent(t) for t in (0.0, 0.67, 0.675, 0.994, 0.995, 1.0)] == [0, 67, 68, 99, 100, 100]
    assert store.percent(None) is None


def test_request_score_rules(clean_db, stub_judge):
    from assay.scoring.errors import BadRequest, Conflict, NotFound

    with transaction() as session, pytest.raises(NotFound):
        svc.request_score(session, "nope", force=False, triggered_by="t")
    put(make_session("running", status="in_progress"))
    with transaction() as session, pytest.raises(BadRequest, match="not completed"):
        svc.request_score(session, "running", force=False, triggered_by="t")
    put(make_session("s1"))
    with transaction() as session:
        created = svc.request_score(session, "s1", force=False, triggered_by="t")
    assert created.status_code == 202 and created.created and len(created.refs) == 1
    with transaction() as session:
        again = svc.request_score(session, "s1", force=False, triggered_by="t")
    assert (again.status_code, again.score_id, again.created) == (202, created.score_id, False)
    with transaction() as session, pytest.raises(Conflict):
        svc.request_score(session, "s1", force=True, triggered_by="t")
    run_refs(created.refs)
    with transaction() as session:
        done = svc.request_score(session, "s1", force=False, triggered_by="t")
    assert (done.status_code, done.score_id) == (200, created.score_id)
    with transaction() as session:
        record = current_suite(session, "alert_session")
        record.options = {**record.options, "enabled": False}
    with transaction() as session, pytest.raises(Conflict, match="disabled"):
        svc.request_score(session, "s1", force=True, triggered_by="t")
