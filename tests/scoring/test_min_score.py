"""A component's ``min_score`` makes it a pass blocker: an item whose score of that component is below
it (or that could not be scored: skipped) cannot pass, whatever its total, and the blocker is named."""

from __future__ import annotations

from sqlalchemy import select

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Score
from assay.scoring.suites.criteria import load_criteria, register_criteria
from tests.scoring.test_pipeline import land_all, make_batch, plan_all

FLOORED = "results_match"


def _batch_with_floor(min_score: float):
    """A one-item kql batch whose criteria give ``results_match`` a min_score."""
    batch_id, (score_id,) = make_batch(1)
    with transaction() as s:
        score = s.get(Score, score_id)
        criteria = load_criteria(s, score.criteria_hash)
        spec = criteria.components[FLOORED].model_copy(update={"min_score": min_score})
        floored = criteria.model_copy(update={"components": {**criteria.components, FLOORED: spec}})
        score.criteria_hash = register_criteria(s, floored)
        s.get(Batch, batch_id).criteria_hash = score.criteria_hash
    return batch_id, score_id


def _finish(batch_id, floored_result: ComponentResult) -> Score:
    land_all(plan_all(batch_id), lambda ref: floored_result if ref.component == FLOORED else ComponentResult.ok(1.0))
    with transaction() as s:
        return s.scalars(select(Score).where(Score.batch_id == batch_id)).one()


def test_a_score_below_min_score_blocks_the_pass_and_names_it(clean_db):
    batch_id, _ = _batch_with_floor(0.8)
    # 0.25 * 0.7 + 0.75 = 0.925: the total clears the kql threshold of 0.9; only the floor blocks.
    score = _finish(batch_id, ComponentResult.ok(0.7))
    assert score.status == "completed" and abs(score.total - 0.925) < 1e-9
    assert score.passed is False
    assert score.error_message == "results_match: score 0.70 is below its min_score 0.80"


def test_a_score_at_min_score_does_not_block(clean_db):
    batch_id, _ = _batch_with_floor(0.8)
    # 0.25 * 0.8 + 0.75 = 0.95: above the kql threshold of 0.9, and the floor is met.
    score = _finish(batch_id, ComponentResult.ok(0.8))
    assert score.passed is True and score.error_message is None


def test_a_skipped_component_with_a_min_score_blocks_the_pass(clean_db):
    batch_id, _ = _batch_with_floor(0.5)
    score = _finish(batch_id, ComponentResult.skipped("no results to compare"))
    assert score.status == "completed" and score.total == 1.0 and score.partial is True
    assert score.passed is False
    assert score.error_message == "results_match: skipped (no results to compare), so its min_score 0.50 was not checked"


def test_without_min_score_a_low_component_only_lowers_the_total(clean_db):
    batch_id, _ = make_batch(1)
    # 0.25 * 0.8 + 0.75 = 0.95 passes; the same low score blocks only where a floor is set.
    score = _finish(batch_id, ComponentResult.ok(0.8))
    assert score.passed is True
