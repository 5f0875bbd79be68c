"""Bytes per item (migration 0010): lookups still find their index, the partial indexes leave landed
rows out, and a metric's missing usage is SQL NULL, not a JSON document."""

import json
import uuid

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from assay.scoring.store.db import alembic_config, transaction
from assay.scoring.store.models import Item, Score, ScoreComponent, SuiteRecord


def _plan(session, sql: str, **params) -> str:
    # Tiny tables make a sequential scan cheapest; switched off, the plan shows which index serves.
    session.execute(text("SET LOCAL enable_seqscan = off"))
    return "\n".join(session.scalars(text(f"EXPLAIN {sql}"), params))


def _score_with_components(session, statuses: dict[str, str]) -> uuid.UUID:
    suite = session.get(SuiteRecord, "kql")
    item = Item(kind="kql", payload={}, content_hash="0" * 64)
    session.add(item)
    session.flush()
    score = Score(
        item_id=item.id, suite_name="kql", criteria_hash=suite.current_criteria_hash, components_total=len(statuses), triggered_by="t"
    )
    session.add(score)
    session.flush()
    for name, status in statuses.items():
        landed = status in ("ok", "failed", "skipped")
        session.add(
            ScoreComponent(
                score_id=score.id, component=name, queue="metrics", status=status, weight=0.25, usage=None,
                score=1.0 if landed else None,
            )
        )
    return score.id


def test_reconciler_and_claim_lookups_use_the_partial_status_index(clean_db):
    with transaction() as session:
        _score_with_components(session, {"a": "ok", "b": "pending", "c": "in_progress"})
        for where in (
            "status = 'in_progress' AND lease_expires_at < now()",
            "status = 'in_progress' AND lease_owner IN ('w1', 'w2')",  # the lease heartbeat
            "status = 'pending'",
            "status = 'deferred' AND run_after < now()",
        ):
            assert "ix_score_components_unlanded_status" in _plan(session, f"SELECT score_id FROM score_components WHERE {where}")
        # Landed rows are not in it: a lookup of them cannot use it.
        assert "ix_score_components_unlanded_status" not in _plan(session, "SELECT score_id FROM score_components WHERE status = 'ok'")
        counts = dict(session.execute(text("SELECT status, count(*) FROM score_components GROUP BY status")).all())
        assert counts == {"ok": 1, "pending": 1, "in_progress": 1}


def test_partial_indexes_leave_out_landed_rows_and_rows_outside_provider_batches(clean_db):
    with transaction() as session:
        defs = dict(
            session.execute(
                text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('items', 'scores', 'score_components')")
            ).all()
        )
    assert "WHERE" in defs["ix_score_components_unlanded_status"]
    for status in ("pending", "in_progress", "deferred"):
        assert status in defs["ix_score_components_unlanded_status"]
    assert "ok" not in defs["ix_score_components_unlanded_status"].split("WHERE", 1)[1]
    assert "(status)" in defs["ix_score_components_unlanded_status"]
    assert "ix_score_components_status_lease" not in defs
    assert "provider_batch_id IS NOT NULL" in defs["ix_score_components_provider_batch_id"]
    assert "ix_items_content_hash" not in defs
    assert "ix_scores_calibration_run_id" not in defs


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM scores WHERE calibration_run_id = :run",
        # What the cascade from calibration_runs runs.
        "DELETE FROM scores WHERE calibration_run_id = :run",
    ],
)
def test_calibration_run_lookups_use_the_repeat_index(clean_db, sql):
    with transaction() as session:
        plan = _plan(session, sql, run=uuid.uuid4())
        session.rollback()
    assert "uq_scores_calibration_item_repeat" in plan


def test_provider_batch_lookup_uses_its_partial_index(clean_db):
    with transaction() as session:
        plan = _plan(session, "SELECT score_id FROM score_components WHERE provider_batch_id = :p", p=uuid.uuid4())
    assert "ix_score_components_provider_batch_id" in plan


def test_a_metric_usage_is_sql_null_and_a_judge_usage_round_trips(clean_db):
    usage = {"input_tokens": 52, "output_tokens": 23, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    with transaction() as session:
        score_id = _score_with_components(session, {"schema_match": "ok"})
        session.add(ScoreComponent(score_id=score_id, component="llm_grading", queue="judge", status="ok", weight=0.25, usage=usage))
    with transaction() as session:
        rows = dict(
            session.execute(
                text("SELECT component, usage IS NULL FROM score_components WHERE score_id = :s"), {"s": score_id}
            ).all()
        )
        assert rows == {"schema_match": True, "llm_grading": False}
        stored = {c.component: c.usage for c in session.query(ScoreComponent).filter_by(score_id=score_id)}
    assert stored == {"schema_match": None, "llm_grading": usage}


def test_upgrade_keeps_documents_as_json_text_turns_json_nulls_into_sql_null_and_keeps_the_view(scratch_pg_url):
    cfg = alembic_config(scratch_pg_url)
    command.upgrade(cfg, "0009")
    engine = create_engine(scratch_pg_url)
    payload = {"status": "completed", "prompt": "p", "n": 1.0}
    details = {"score_breakdown": {"a": 3}, "score_reasoning": "fine"}
    ids = {}
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO scoring_criteria_definitions VALUES ('h', '{}', now())"))
            ids["item"] = conn.scalar(
                text(
                    "INSERT INTO items (id, kind, external_id, payload, content_hash, created_at) "
                    "VALUES (gen_random_uuid(), 'alert_session', 's1', CAST(:p AS jsonb), 'c', now()) RETURNING id"
                ),
                {"p": json.dumps(payload)},
            )
            ids["score"] = conn.scalar(
                text(
                    "INSERT INTO scores (id, item_id, position, suite_name, criteria_hash, status, total, partial, "
                    "components_total, components_landed, usage, cost_usd, triggered_by, created_at, completed_at) "
                    "VALUES (gen_random_uuid(), :i, 0, 's', 'h', 'completed', 0.5, false, 2, 2, 'null', 0, 't', now(), now()) "
                    "RETURNING id"
                ),
                {"i": ids["item"]},
            )
            for name, queue, usage, det in (("m", "metrics", "null", "null"), ("j", "judge", '{"input_tokens": 3}', json.dumps(details))):
                conn.execute(
                    text(
                        "INSERT INTO score_components (score_id, component, queue, status, weight, attempts, cost_usd, usage, details) "
                        "VALUES (:s, :c, :q, 'ok', 0.5, 1, 0, CAST(:u AS jsonb), CAST(:d AS jsonb))"
                    ),
                    {"s": ids["score"], "c": name, "q": queue, "u": usage, "d": det},
                )
        command.upgrade(cfg, "head")
        with engine.connect() as conn:
            types = dict(
                conn.execute(
                    text(
                        "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
                        "WHERE column_name IN ('payload', 'usage', 'details') AND table_name IN ('items', 'scores', 'score_components')"
                    )
                ).all()
            )
            assert types == dict.fromkeys(
                ["items.payload", "scores.usage", "score_components.usage", "score_components.details"], "json"
            )
            assert conn.scalar(text("SELECT payload FROM items")) == payload
            assert conn.scalar(text("SELECT usage IS NULL FROM scores")) is True
            rows = {r.component: (r.usage, r.details) for r in conn.execute(text("SELECT component, usage, details FROM score_components"))}
            assert rows == {"m": (None, None), "j": ({"input_tokens": 3}, details)}
            view = conn.execute(text("SELECT session_id, score_breakdown, score_reasoning FROM session_scores")).one()
            assert tuple(view) == ("s1", {"a": 3}, "fine")
        command.downgrade(cfg, "0009")
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT data_type FROM information_schema.columns WHERE table_name = 'items' AND column_name = 'payload'")) == "jsonb"
            assert conn.scalar(text("SELECT score_breakdown FROM session_scores")) == {"a": 3}
    finally:
        engine.dispose()
