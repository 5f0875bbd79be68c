"""Retention on the real store: which batches a suite's policy lets go, what it never removes, and
how a pruned batch answers."""

from __future__ import annotations

import json

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from assay.scoring import features  # noqa: F401  (the keep rules of reviews and calibration)
from assay.scoring.store import retention
from assay.scoring.store.db import transaction
from assay.scoring.store.models import (
    Batch,
    CalibrationRun,
    CriteriaDefinition,
    Item,
    Review,
    ReviewQueueEntry,
    Score,
    ScoreComponent,
    SuiteRecord,
    utcnow,
)
from assay.workers.schedule import beat_schedule
from assay.settings import get_settings

SUITE = "kql"
DAY = timedelta(days=1)


def set_policy(**policy) -> None:
    with transaction() as s:
        record = s.get(SuiteRecord, SUITE)
        record.options = {**record.options, "retention": policy}


def criteria(tag: str, age_days: float) -> str:
    """A criteria hash registered ``age_days`` ago, with the shipped kql suite's content (readable)."""
    digest = (tag * 64)[:64]
    with transaction() as s:
        shipped = s.get(CriteriaDefinition, s.get(SuiteRecord, SUITE).current_criteria_hash).criteria_content
        s.add(CriteriaDefinition(criteria_hash=digest, criteria_content=shipped, created_at=utcnow() - age_days * DAY))
    return digest


def make_current(digest: str) -> None:
    with transaction() as s:
        s.execute(update(SuiteRecord).where(SuiteRecord.name == SUITE).values(current_criteria_hash=digest))


def items(n: int) -> list[uuid.UUID]:
    with transaction() as s:
        rows = [Item(kind="kql", payload={}, content_hash="0" * 64) for _ in range(n)]
        s.add_all(rows)
        s.flush()
        return [row.id for row in rows]


def batch(digest: str, item_ids, age_days: float, statuses=None, calibration: uuid.UUID | None = None) -> uuid.UUID:
    """A finished batch scoring ``item_ids`` under ``digest`` ``age_days`` ago, one component per score."""
    created = utcnow() - age_days * DAY
    with transaction() as s:
        row = Batch(
            suite_name=SUITE, criteria_hash=digest, created_by="t", total_items=len(item_ids), status="completed",
            created_at=created, finished_at=created, summary={"pass_rate": 1.0},
        )
        s.add(row)
        s.flush()
        for position, item_id in enumerate(item_ids, 1):
            status = (statuses or {}).get(position, "completed")
            score = Score(
                item_id=item_id, batch_id=row.id, position=position, suite_name=SUITE, criteria_hash=digest,
                status=status, total=1.0 if status == "completed" else None, passed=True if status == "completed" else None,
                components_total=1, components_landed=1 if status == "completed" else 0, triggered_by="t",
                created_at=created, calibration_run_id=calibration, calibration_repeat=position if calibration else None,
            )
            s.add(score)
            s.flush()
            s.add(ScoreComponent(
                score_id=score.id, component="schema_match", queue="metrics", weight=1.0,
                status="ok" if status == "completed" else "pending", score=1.0 if status == "completed" else None,
            ))
        return row.id


def batch_scores(batch_id) -> int:
    with transaction() as s:
        return s.scalar(select(func.count()).select_from(Score).where(Score.batch_id == batch_id))


def pruned_ids(**kwargs) -> set[uuid.UUID]:
    return {b.batch_id for plan in retention.prune(SUITE, **kwargs) for b in plan.batches}


@pytest.fixture
def history(clean_db):
    """Three items scored under an old hash (60 days ago), again under it (40 days ago), then under
    the current hash (10 days ago)."""
    old, new = criteria("a", 90), criteria("b", 20)
    make_current(new)
    ids = items(3)
    return {
        "old": old, "new": new, "items": ids,
        "first": batch(old, ids, 60), "rerun": batch(old, ids, 40), "current": batch(new, ids, 10),
    }


def test_no_policy_prunes_nothing(history):
    assert retention.prune(SUITE) == []
    assert batch_scores(history["first"]) == 3


def test_keep_criteria_prunes_the_older_hashes_batches_and_says_so(history):
    set_policy(keep_criteria=1)
    assert pruned_ids() == {history["first"], history["rerun"]}
    assert batch_scores(history["first"]) == batch_scores(history["rerun"]) == 0
    assert batch_scores(history["current"]) == 3
    with transaction() as s:
        row = s.get(Batch, history["first"])
        assert row.pruned_at is not None and row.pruned_scores == 3 and row.summary == {"pass_rate": 1.0}
        assert s.scalar(select(func.count()).select_from(Item)) == 3  # items stay
        assert s.scalar(select(func.count()).select_from(ScoreComponent)) == 3  # the current batch's only


def test_keep_criteria_two_keeps_both_hashes(history):
    set_policy(keep_criteria=2)
    assert pruned_ids() == set()


def test_keep_days_alone_keeps_the_latest_score_per_item_and_hash(history):
    """With every hash kept, only a batch superseded under its own hash goes: the re-run is the old
    hash's latest word on each item and stays; the first batch, older than it, goes."""
    set_policy(keep_days=30)
    assert pruned_ids() == {history["first"]}
    assert batch_scores(history["rerun"]) == 3


def test_keep_days_keeps_young_batches(history):
    set_policy(keep_criteria=1, keep_days=50)
    assert pruned_ids() == {history["first"]}  # the re-run (40 days) is young enough


def test_a_batch_with_one_item_lacking_a_newer_finished_score_is_kept_whole(history):
    extra = items(1)
    lonely = batch(history["old"], [*history["items"], *extra], 50)
    set_policy(keep_criteria=1)
    assert lonely not in pruned_ids()
    assert batch_scores(lonely) == 4


def test_a_newer_cancelled_or_pending_score_supersedes_nothing(clean_db):
    old, new = criteria("a", 90), criteria("b", 20)
    make_current(new)
    ids = items(2)
    first = batch(old, ids, 60)
    batch(new, ids, 10, statuses={1: "cancelled", 2: "pending"})
    set_policy(keep_criteria=1)
    assert pruned_ids() == set()
    assert batch_scores(first) == 2


def test_pending_and_running_scores_are_never_removed(history):
    running = batch(history["old"], history["items"], 70, statuses={2: "in_progress"})
    set_policy(keep_criteria=1)
    assert running not in pruned_ids()
    assert batch_scores(running) == 3


@pytest.mark.parametrize("reference", ["queued", "reviewed"])
def test_a_score_in_the_review_queue_or_reviewed_keeps_its_batch(history, reference):
    with transaction() as s:
        score = s.scalars(select(Score).where(Score.batch_id == history["first"])).first()
        entry = ReviewQueueEntry(score_id=score.id, suite_name=SUITE, item_id=score.item_id, criteria_hash=score.criteria_hash, reasons=[])
        s.add(entry)
        s.flush()
        if reference == "reviewed":
            s.add(Review(queue_entry_id=None, score_id=score.id, item_id=score.item_id, suite_name=SUITE, reviewer="r", passed=True))
            s.delete(entry)
    set_policy(keep_criteria=1)
    assert pruned_ids() == {history["rerun"]}
    assert batch_scores(history["first"]) == 3


def test_calibration_scores_are_kept(history):
    with transaction() as s:
        run = CalibrationRun(suite_name=SUITE, criteria_hash=history["old"], sample=3, repeats=2, created_by="t")
        s.add(run)
        s.flush()
        run_id = run.id
    calibration = batch(history["old"], history["items"], 80, calibration=run_id)
    set_policy(keep_criteria=1)
    assert calibration not in pruned_ids()
    assert batch_scores(calibration) == 3


def test_dry_run_removes_nothing_and_reports_what_would_go(history):
    set_policy(keep_criteria=1)
    plans = retention.prune(SUITE, dry_run=True)
    assert [(b.batch_id, b.scores, b.components) for b in plans[0].batches] == [
        (history["first"], 3, 3), (history["rerun"], 3, 3)
    ]
    assert batch_scores(history["first"]) == 3
    with transaction() as s:
        assert s.get(Batch, history["first"]).pruned_at is None


def test_pruning_goes_in_chunks(history):
    set_policy(keep_criteria=1)
    plans = retention.prune(SUITE, chunk_size=2)
    assert plans[0].removed_scores == 6 and plans[0].removed_components == 6
    with transaction() as s:
        assert s.get(Batch, history["first"]).pruned_scores == 3


def test_pruning_without_keep_rules_is_refused(history, monkeypatch):
    monkeypatch.setattr(retention, "_keep_rules", [])
    set_policy(keep_criteria=1)
    with pytest.raises(retention.NoKeepRules):
        retention.prune(SUITE)
    assert batch_scores(history["first"]) == 3


def test_the_features_register_their_keep_rules():
    assert set(retention.registered_keep_rules()) >= {
        "assay.scoring.trust.review.queued_scores",
        "assay.scoring.trust.review.reviewed_scores",
        "assay.scoring.trust.calibration.calibration_scores",
    }


def test_beat_runs_retention_nightly():
    entry = beat_schedule(get_settings())["prune-history"]
    assert entry["task"] == "scoring.prune_history"
    assert entry["schedule"].hour == {3} and entry["schedule"].minute == {30}


def test_a_pruned_batch_says_so_in_its_api(history, api_client):
    set_policy(keep_criteria=1)
    retention.prune(SUITE)
    first = str(history["first"])
    view = api_client.get(f"/api/v1/batches/{first}").json()
    assert view["pruned"]["scores_removed"] == 3 and view["progress"] is None and view["summary"] == {"pass_rate": 1.0}
    for path in ("results", "results?format=csv", "report.json", "report.csv", "report.xlsx"):
        answer = api_client.get(f"/api/v1/batches/{first}/{path}")
        assert answer.status_code == 410, path
        assert answer.json()["error"] == "pruned" and answer.json()["details"]["pruned_scores"] == 3
    current = api_client.get(f"/api/v1/batches/{history['current']}").json()
    assert current["pruned"] is None
    assert api_client.get(f"/api/v1/batches/{history['current']}/results").json()["total"] == 3


def test_the_prune_command_dry_run_then_prune(history):
    from typer.testing import CliRunner

    from assay.cli import cli

    set_policy(keep_criteria=1)
    dry = CliRunner().invoke(cli, ["prune", "--suite", SUITE, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "dry run: 2 batch(es), 6 score(s), 6 component(s) would be removed" in dry.stdout
    assert "would be pruned (dry run)" in dry.stdout  # the table too is on stdout
    as_json = json.loads(CliRunner().invoke(cli, ["prune", "--suite", SUITE, "--dry-run", "--json"]).stdout)
    assert as_json["dry_run"] is True and as_json["scores"] == 6 and len(as_json["batches"]) == 2
    assert batch_scores(history["first"]) == 3
    done = CliRunner().invoke(cli, ["prune"])
    assert done.exit_code == 0, done.output
    assert "pruned 2 batch(es): 6 score(s), 6 component(s) removed" in done.stdout
    assert batch_scores(history["first"]) == 0
    unknown = CliRunner().invoke(cli, ["prune", "--suite", "no-such-suite"])
    assert unknown.exit_code == 2 and "no such suite" in unknown.output
