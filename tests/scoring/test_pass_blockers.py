"""A component may name why its item cannot pass, whatever the total (invariant 7): finalizing keeps
``passed`` false, names the blocker, and keeps the total that was measured. Any kind's metric can
use it (``ComponentResult.ok(..., pass_blocker=...)`` / ``skipped(..., pass_blocker=...)``)."""

from __future__ import annotations

from sqlalchemy import select

from assay.scoring.metrics.registry import PASS_BLOCKER, ComponentResult
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score, ScoreComponent
from tests.scoring.test_pipeline import land_all, make_batch, plan_all


def _finished(score_id):
    with transaction() as s:
        score = s.get(Score, score_id)
        comps = {c.component: c for c in s.scalars(select(ScoreComponent).where(ScoreComponent.score_id == score_id))}
        return score, comps


def test_a_full_total_passes_when_no_component_names_a_blocker(clean_db):
    batch_id, scores = make_batch(1)
    land_all(plan_all(batch_id), lambda ref: ComponentResult.ok(1.0))
    score, _ = _finished(scores[0])
    assert score.passed is True and score.error_message is None


def test_an_ok_component_naming_a_blocker_keeps_the_item_from_passing(clean_db):
    batch_id, scores = make_batch(1)
    land_all(
        plan_all(batch_id),
        lambda ref: ComponentResult.ok(1.0, {"rows": 5}, pass_blocker="the results differ")
        if ref.component == "results_match"
        else ComponentResult.ok(1.0),
    )
    score, comps = _finished(scores[0])
    assert score.status == "completed" and score.total == 1.0  # what was measured
    assert score.passed is False
    assert score.error_message == "results_match: the results differ"
    assert comps["results_match"].details == {"rows": 5, PASS_BLOCKER: "the results differ"}


def test_a_skipped_component_naming_a_blocker_keeps_the_item_from_passing(clean_db):
    batch_id, scores = make_batch(1)
    land_all(
        plan_all(batch_id),
        lambda ref: ComponentResult.skipped("nothing ran", pass_blocker="no execution evidence")
        if ref.component == "results_match"
        else ComponentResult.ok(1.0),
    )
    score, _ = _finished(scores[0])
    assert score.partial is True and score.total == 1.0 and score.passed is False
    assert score.error_message == "results_match: no execution evidence"


def test_the_live_line_of_a_blocked_item_names_the_blocker_not_the_threshold(clean_db):
    """A kind without live lines of its own (pandas, alert sessions) shows the generic line: an item
    whose total reached the threshold but was blocked must not read "below the threshold"."""
    from assay.scoring.reports.views import live_line

    batch_id, scores = make_batch(1)
    land_all(
        plan_all(batch_id),
        lambda ref: ComponentResult.skipped("no reference", pass_blocker="correctness could not be established")
        if ref.component == "results_match"
        else ComponentResult.ok(1.0),
    )
    with transaction() as s:
        score = s.get(Score, scores[0])
        line = live_line(score, 0.9)
    assert line.startswith("Score: 100.0% (FAIL: results_match: correctness could not be established) (partial)")
    assert "<90%" not in line
