"""``machine_scores()``: one test per reader of machine verdicts, each showing that a calibration
score (newer, and with another verdict, than the item's machine score) is left out.

The seed: an item with a completed machine score (0.9, passed) and, an hour later, a completed
calibration score of the same item under the same criteria (0.3, failed). A reader that forgot the
filter would show the calibration score as the latest, or count it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, literal, select

from assay.api.dashboard import queries as dashboard
from assay.observability import ITEMS_SCORED
from assay.scoring.intake import batches
from assay.scoring.sessions.items import AlertSessionItem
from assay.scoring.pipeline.carry_over import latest_finished_score
from assay.scoring.pipeline.components import pending_score
from assay.scoring.pipeline.summaries import batch_counts, batch_summary
from assay.scoring.rescoring import rescore
from assay.scoring.rescoring.diff import criteria_diff
from assay.scoring.sessions import analytics
from assay.scoring.sessions import service as sessions
from assay.scoring.sessions import store as session_store
from assay.scoring.store.db import transaction
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import Batch, CalibrationRun, Item, Score, ScoreComponent
from assay.scoring.suites.criteria import current_suite, load_criteria, register_suite
from assay.scoring.suites.loader import load_suite
from assay.settings import get_settings
from tests.scoring.sessions.helpers import make_session
from tests.scoring.test_pipeline import PAYLOAD, land_all, plan_all

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CONFIG = get_settings().config_dir


@dataclass
class Seed:
    item_id: uuid.UUID
    machine: uuid.UUID
    calibration: uuid.UUID
    batch_id: uuid.UUID
    criteria_hash: str


def _score(item_id, suite, criteria_hash, *, total, passed, at, batch_id=None, run_id=None, status="completed", repeat=1):  # type: ignore[no-untyped-def]
    return Score(
        id=uuid.uuid4(), item_id=item_id, batch_id=batch_id, suite_name=suite, criteria_hash=criteria_hash,
        status=status, total=total, passed=passed, components_total=1, components_landed=1, triggered_by="t",
        created_at=at, completed_at=at, calibration_run_id=run_id, calibration_repeat=repeat if run_id else None,
    )


def seed(suite: str, item: Item | None = None) -> Seed:
    """The module docstring's item, machine score and newer calibration score, under ``suite``'s current
    criteria; both scores sit in one batch (as a batch summary would meet them)."""
    with transaction() as s:
        record = current_suite(s, suite)
        h = record.current_criteria_hash
        if item is None:
            item = Item(kind=record.kind, payload=PAYLOAD, content_hash="0" * 64, external_id="q1")
            s.add(item)
        else:
            item = s.merge(item)
        batch = Batch(suite_name=suite, criteria_hash=h, created_by="t", total_items=2, status="completed")
        run = CalibrationRun(suite_name=suite, criteria_hash=h, sample=1, repeats=2, status="completed", created_by="t")
        s.add_all([batch, run])
        s.flush()
        machine = _score(item.id, suite, h, total=0.9, passed=True, at=T0, batch_id=batch.id)
        calibration = _score(
            item.id, suite, h, total=0.3, passed=False, at=T0 + timedelta(hours=1), batch_id=batch.id, run_id=run.id
        )
        s.add_all([machine, calibration])
        s.flush()
        return Seed(item.id, machine.id, calibration.id, batch.id, h)


def test_the_filter_is_calibration_run_id_is_null(clean_db):
    seeded = seed("kql")
    with transaction() as s:
        assert s.scalars(select(Score.id).where(machine_scores())).all() == [seeded.machine]
        alias = Score.__table__.alias("other")
        assert s.scalars(select(alias.c.id).where(machine_scores(alias))).all() == [seeded.machine]


def test_item_scores_api_and_dashboard_item_page(clean_db, api_client):
    seeded = seed("kql")
    with transaction() as s:
        _, scores = batches.get_item(s, seeded.item_id)
        assert [score.id for score in scores] == [seeded.machine]
        _, page_scores = dashboard.item_with_scores(s, seeded.item_id)
        assert [score.id for score in page_scores] == [seeded.machine]
    r = api_client.get(f"/api/v1/items/{seeded.item_id}")
    assert r.status_code == 200, r.text
    assert str(seeded.calibration) not in r.text and str(seeded.machine) in r.text


def _seed_session(session_id: str = "sess-cal") -> Seed:
    with transaction() as s:
        stored = session_store.store_session(s, AlertSessionItem.model_validate(make_session(session_id)))
        item = stored.item
    return seed("alert_session", item)


def test_sessions_latest_active_and_list(clean_db):
    seeded = _seed_session()
    with transaction() as s:
        assert session_store.latest_score(s, "sess-cal").id == seeded.machine
        _, rows = sessions.list_sessions(s, scoring=None, min_score=None, status=None, sort="newest", limit=10, offset=0)
        assert [row.score_id for row in rows] == [seeded.machine]
        assert [score.id for score in dashboard.session_scores(s, "sess-cal")] == [seeded.machine]
        dash_rows, _ = dashboard.list_sessions(s)
        assert [row.score.id for row in dash_rows] == [seeded.machine]
        # A pending calibration score is no active machine score of the session.
        run_id = s.scalar(select(CalibrationRun.id))
        s.add(_score(seeded.item_id, "alert_session", seeded.criteria_hash, total=None, passed=None,
                     at=T0 + timedelta(hours=2), run_id=run_id, status="pending", repeat=2))
        s.flush()
        s.execute(Score.__table__.update().where(Score.id == seeded.machine).values(status="pending"))
        assert session_store.active_score(s, "sess-cal").id == seeded.machine


def test_session_analytics_and_training_data(clean_db):
    seeded = _seed_session()
    with transaction() as s:
        considered = analytics._scores(None, None, None, latest_only=True)
        assert s.scalars(select(considered.c.score_id)).all() == [seeded.machine]
        curated = analytics.training_data(s, min_score=0, criteria_hash=None, limit=10, offset=0)
        assert [row.score_id for row in curated.rows] == [seeded.machine] and curated.total == 1
        _, looked = dashboard.missing_tools(s)
        assert looked == 1


def test_rescoring_selection_counts_only_machine_scores(clean_db):
    """An item whose only score under the current criteria is a calibration repeat is still stale,
    and a re-score carries over from its machine score, never from a calibration repeat."""
    with transaction() as s:
        old = current_suite(s, "kql").current_criteria_hash
        item = Item(kind="kql", payload=PAYLOAD, content_hash="0" * 64)
        s.add(item)
        s.flush()
        s.add(_score(item.id, "kql", old, total=0.9, passed=True, at=T0))
        s.flush()
        new = register_suite(s, load_suite(CONFIG, "kql", env={"ASSAY_KQL_JUDGE_MODEL": "claude-sonnet-5-5"}))
        assert new != old
        run = CalibrationRun(suite_name="kql", criteria_hash=new, sample=1, repeats=2, status="completed", created_by="t")
        s.add(run)
        s.flush()
        calibration = _score(item.id, "kql", new, total=0.3, passed=False, at=T0 + timedelta(hours=1), run_id=run.id)
        s.add(calibration)
        s.flush()
        record = current_suite(s, "kql")
        assert s.scalars(select(Item.id).where(rescore.candidates(record, rescore.Selection(stale_only=True)))).all() == [item.id]
        latest = s.scalar(select(latest_finished_score(literal(item.id), literal("kql"))))
        assert latest != calibration.id


def test_diff_leaves_calibration_scores_out(clean_db):
    with transaction() as s:
        old = current_suite(s, "kql").current_criteria_hash
        item = Item(kind="kql", payload=PAYLOAD, content_hash="0" * 64)
        s.add(item)
        s.flush()
        s.add(_score(item.id, "kql", old, total=0.5, passed=False, at=T0))
        new = register_suite(s, load_suite(CONFIG, "kql", env={"ASSAY_KQL_JUDGE_MODEL": "claude-sonnet-5-5"}))
        s.add(_score(item.id, "kql", new, total=1.0, passed=True, at=T0 + timedelta(hours=1)))
        run = CalibrationRun(suite_name="kql", criteria_hash=new, sample=1, repeats=2, status="completed", created_by="t")
        s.add(run)
        s.flush()
        # Newer than the machine score under `new`, and with another verdict.
        s.add(_score(item.id, "kql", new, total=0.0, passed=False, at=T0 + timedelta(hours=2), run_id=run.id))
        other = Item(kind="kql", payload=PAYLOAD, content_hash="0" * 64)
        s.add(other)
        s.flush()
        s.add(_score(other.id, "kql", new, total=0.2, passed=False, at=T0, run_id=run.id))
        s.flush()
        diff = criteria_diff(s, suite="kql", from_hash=old, to_hash=new)
        assert diff.summary.items_compared == 1
        assert diff.summary.items_only_to == 0
        assert diff.summary.fail_to_pass == 1
        assert [row.new_total for row in diff.items] == [1.0]


def test_batch_summary_counts_machine_verdicts_only(clean_db):
    seeded = seed("kql")
    with transaction() as s:
        summary = batch_summary(s, seeded.batch_id)
        assert summary["counts"]["completed"] == 1 and summary["counts"]["passed"] == 1
        assert summary["pass_rate"] == 1.0 and summary["mean_total"] == 0.9
        # Progress still sees every score of the batch.
        assert batch_counts(s, seeded.batch_id)["completed"] == 2


def test_criteria_page_counts_machine_scores_only(clean_db):
    seeded = seed("kql")
    with transaction() as s:
        rows, suites = dashboard.criteria_overview(s)
        row = next(r for r in rows if r.criteria_hash == seeded.criteria_hash)
        assert (row.scores, row.latest_scores) == (1, 1)
        kql = next(x for x in suites if x.suite == "kql")
        assert (kql.current, kql.stale) == (1, 0)


def _items_scored(suite: str) -> float:
    return sum(
        sample.value
        for metric in ITEMS_SCORED.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("suite") == suite
    )


def test_prometheus_outcomes_leave_calibration_scores_out(clean_db):
    """Finalizing calibration repeats counts no outcome; a machine score does."""
    with transaction() as s:
        record = current_suite(s, "kql")
        criteria = load_criteria(s, record.current_criteria_hash)
        batch = Batch(suite_name="kql", criteria_hash=record.current_criteria_hash, created_by="t", total_items=3)
        run = CalibrationRun(suite_name="kql", criteria_hash=record.current_criteria_hash, sample=1, repeats=2,
                             status="running", created_by="t")
        item = Item(kind="kql", payload=PAYLOAD, content_hash="0" * 64)
        s.add_all([batch, run, item])
        s.flush()
        for position, repeat in enumerate((None, 1, 2), start=1):
            row = pending_score(
                item_id=item.id, suite="kql", criteria_hash=record.current_criteria_hash, criteria=criteria,
                triggered_by="t", created_at=T0 + timedelta(minutes=position), batch_id=batch.id, position=position,
            )
            s.add(Score(**row, calibration_run_id=run.id if repeat else None, calibration_repeat=repeat))
        batch_id = batch.id
    before = _items_scored("kql")
    land_all(plan_all(batch_id))
    assert _items_scored("kql") - before == 1, "only the machine score is an outcome"
    with transaction() as s:
        finished = s.scalar(select(func.count()).where(Score.batch_id == batch_id, Score.status == "completed"))
        assert finished == 3
        assert s.scalar(select(func.count()).select_from(ScoreComponent)) > 0
