"""Calibration runs on the real store: the noise statistics on known data (checked with numpy), the
deterministic sample, the run's batch (N×K calibration scores outside the one-active rule, judges never
carried over, metrics carried), the estimate, the noise stored when the batch finishes, cancel."""

from __future__ import annotations

import hashlib
import math
import uuid

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from assay.scoring.errors import InvalidInput, NotFound
from assay.scoring.intake import batches
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.landing import land
from assay.scoring.pipeline.planning import plan_chunk
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, CalibrationRun, Score, ScoreComponent
from assay.scoring.suites.loader import load_model_catalog
from assay.scoring.trust import calibration
from assay.scoring.trust.noise import TOTAL_COMPONENT, flip_share, latest_noise, noise_of_run, pooled_sigma
from assay.settings import get_settings
from tests.scoring.test_pipeline import make_batch
from tests.scoring.test_rescore import complete_all

CATALOG = load_model_catalog(get_settings().config_dir)


# --- the statistics ----------------------------------------------------------------------------------------


def test_pooled_sigma_is_the_root_of_the_mean_within_item_variance():
    data = {"a": [0.2, 0.4, 0.9], "b": [1.0, 1.0, 1.0], "c": [0.0, 0.5], "d": [0.7]}
    pooled = pooled_sigma(data)
    # By hand: var(a) = 0.13 (mean 0.5: 0.09 + 0.01 + 0.16 = 0.26, /2), var(b) = 0, var(c) = 0.125.
    assert pooled.items == 3  # d has one value: nothing to pool
    assert pooled.sigma_w == pytest.approx(math.sqrt((0.13 + 0.0 + 0.125) / 3))
    expected = np.sqrt(np.mean([np.var(data[k], ddof=1) for k in ("a", "b", "c")]))
    assert pooled.sigma_w == pytest.approx(float(expected))


def test_pooled_sigma_without_two_values_anywhere_is_none():
    assert pooled_sigma({"a": [0.5], "b": []}).sigma_w is None
    assert pooled_sigma({}).items == 0
    assert pooled_sigma({"a": [0.3, 0.3]}).sigma_w == 0.0


def test_flip_share_counts_items_whose_verdict_differs_between_repeats():
    share, items = flip_share({"a": [True, False, True], "b": [True, True], "c": [False, False], "d": [True]})
    assert (share, items) == (pytest.approx(1 / 3), 3)
    assert flip_share({"a": [True]}) == (None, 0)


# --- the run -----------------------------------------------------------------------------------------------


def scored_items(n: int) -> list[uuid.UUID]:
    """n kql items with a completed machine score (every component ok 1.0)."""
    batch_id, score_ids = make_batch(n)
    complete_all(batch_id)
    with transaction() as s:
        return list(s.scalars(select(Score.item_id).where(Score.id.in_(score_ids))))


def start(n: int, k: int, *, lane: str = "realtime", budget: float | None = None) -> tuple[uuid.UUID, uuid.UUID]:
    with transaction() as s:
        plan = calibration.plan(s, "kql", n, k, lane, CATALOG)
        run = calibration.start(s, plan, created_by="tester", lane=lane, budget_usd=budget)
        return run.id, run.batch_id


def test_the_sample_is_the_smallest_sha256_of_suite_and_item_id(clean_db):
    items = scored_items(5)
    expected = sorted(items, key=lambda i: hashlib.sha256(f"kql:{i}".encode()).hexdigest())
    with transaction() as s:
        assert calibration.sample_items(s, "kql", 3) == expected[:3]
        assert calibration.sample_items(s, "kql", 4)[:3] == expected[:3], "a larger sample extends a smaller one"
        assert calibration.sample_items(s, "kql", 50) == expected
        assert calibration.sample_items(s, "pandas_codegen", 3) == []


def test_bounds_a_suite_without_items_and_a_bad_budget_are_refused(clean_db):
    with transaction() as s:
        with pytest.raises(InvalidInput, match="repeats must be between 2"):
            calibration.plan(s, "kql", 3, 1, "realtime", CATALOG)
        with pytest.raises(InvalidInput, match="sample must be between 1"):
            calibration.plan(s, "kql", 0, 2, "realtime", CATALOG)
        with pytest.raises(InvalidInput, match="no stored items"):
            calibration.plan(s, "kql", 3, 2, "realtime", CATALOG)
    scored_items(1)
    with transaction() as s:
        plan = calibration.plan(s, "kql", 3, 2, "realtime", CATALOG)
        with pytest.raises(InvalidInput, match="budget_usd must be positive"):
            calibration.start(s, plan, created_by="t", lane="realtime", budget_usd=0)


def test_the_estimate_counts_every_repeat_and_carries_no_judge_call(clean_db):
    scored_items(3)
    with transaction() as s:
        once = calibration.plan(s, "kql", 3, 2, "realtime", CATALOG).estimate
        thrice = calibration.plan(s, "kql", 3, 6, "realtime", CATALOG).estimate
        halved = calibration.plan(s, "kql", 3, 6, "batch", CATALOG).estimate
    # One judge component (llm_grading); its ok results under this very criteria would carry over in a
    # re-score, never in a calibration.
    assert (once.items, once.judge_calls, once.carried_over) == (3, 6, 0)
    assert thrice.judge_calls == 18
    assert thrice.cost_usd == pytest.approx(3 * once.cost_usd) and once.cost_usd > 0
    assert thrice.input_tokens == 3 * once.input_tokens
    assert halved.cost_usd < thrice.cost_usd
    assert any("judged 6 times" in note for note in thrice.notes)


def test_the_run_writes_n_times_k_calibration_scores_beside_active_machine_scores(clean_db):
    batch_id, _ = make_batch(2)  # pending machine scores: active under the one-active rule
    with transaction() as s:
        plan = calibration.plan(s, "kql", 2, 3, "realtime", CATALOG)
        run = calibration.start(s, plan, created_by="tester", lane="batch", budget_usd=1.5)
        run_id, cal_batch = run.id, run.batch_id
    with transaction() as s:
        batch = s.get(Batch, cal_batch)
        assert (batch.total_items, batch.judge_lane, batch.budget_usd, batch.status) == (6, "batch", 1.5, "planning")
        assert batch.summary == {"calibration": {"run_id": str(run_id), "sample": 2, "repeats": 3}}
        rows = s.execute(
            select(Score.item_id, Score.calibration_repeat, Score.position, Score.status)
            .where(Score.calibration_run_id == run_id)
            .order_by(Score.position)
        ).all()
        assert [r.position for r in rows] == [1, 2, 3, 4, 5, 6]
        assert [r.calibration_repeat for r in rows] == [1, 2, 3, 1, 2, 3]
        assert [r.item_id for r in rows] == [plan.item_ids[0]] * 3 + [plan.item_ids[1]] * 3
        assert {r.status for r in rows} == {"pending"}
        active_machine = s.scalar(
            select(func.count()).where(Score.batch_id == batch_id, Score.status == "pending")
        )
        assert active_machine == 2
    # One score per (run, item, repeat): a second is refused by the store.
    with pytest.raises(IntegrityError), transaction() as s:
        s.add(Score(
            item_id=plan.item_ids[0], suite_name="kql", criteria_hash=plan.criteria_hash, components_total=4,
            triggered_by="t", calibration_run_id=run_id, calibration_repeat=1,
        ))
        s.flush()


# The judge's answer per item (by sample order) and repeat; None: the judge component failed.
JUDGE = [[0.2, 0.4, 0.9], [1.0, 1.0, 1.0], [0.0, 0.5, None]]


def test_judges_are_asked_every_repeat_metrics_carry_and_the_noise_is_stored(clean_db):
    scored_items(3)
    run_id, batch_id = start(3, 3)
    # One chunk holds every repeat of an item: each must carry the metrics from the same machine score.
    refs = []
    for _ in range(2):
        with transaction() as s:
            refs += plan_chunk(s, batch_id, chunk_size=100).refs
    # kql: three metrics (carried from each item's machine score) and one judge (never carried).
    assert {ref.component for ref in refs} == {"llm_grading"} and len(refs) == 9
    with transaction() as s:
        run = calibration.get_run(s, "kql", run_id)
        items = calibration.sample_items(s, "kql", 3)
        where = {r.id: (items.index(r.item_id), r.calibration_repeat) for r in s.execute(
            select(Score.id, Score.item_id, Score.calibration_repeat).where(Score.calibration_run_id == run_id)
        )}
        carried = s.execute(
            select(ScoreComponent.component, ScoreComponent.carried_over_from)
            .join(Score, Score.id == ScoreComponent.score_id)
            .where(Score.calibration_run_id == run_id, ScoreComponent.carried_over_from.is_not(None))
        ).all()
        assert len(carried) == 9 * 3 and {c.component for c in carried} == {"schema_match", "semantic_similarity", "results_match"}
        assert latest_noise(s, run.criteria_hash) is None
    for ref in refs:
        index, repeat = where[ref.score_id]
        value = JUDGE[index][repeat - 1]
        result = ComponentResult.failed("judge down") if value is None else ComponentResult.ok(value)
        with transaction() as s:
            assert claim(s, ref, "w", 60).state == "claimed"
        with transaction() as s:
            land(s, ref, result)

    with transaction() as s:
        run = s.get(CalibrationRun, run_id)
        assert run.status == "completed" and run.completed_at is not None
        noise = latest_noise(s, run.criteria_hash)
        totals = dict(s.execute(select(Score.id, Score.total).where(Score.calibration_run_id == run_id)).all())
        passed = dict(s.execute(select(Score.id, Score.passed).where(Score.calibration_run_id == run_id)).all())
        view = calibration.run_view(s, run)
    judged = {i: [v for v in values if v is not None] for i, values in enumerate(JUDGE)}
    sigma_judge = np.sqrt(np.mean([np.var(v, ddof=1) for v in judged.values()]))
    assert noise is not None and noise.run_id == run_id and noise.repeats == 3
    assert noise.sigma_w["llm_grading"] == pytest.approx(float(sigma_judge))
    # Metrics score 1.0 with weight .75 in all; the judge weighs .25: total = .75 + .25 x judge.
    by_item: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for score_id, (index, _) in where.items():
        if totals[score_id] is not None:
            by_item[index].append(totals[score_id])
            assert passed[score_id] == (totals[score_id] >= 0.9)
    for index, values in judged.items():
        assert sorted(by_item[index]) == pytest.approx(sorted(0.75 + 0.25 * v for v in values))
    assert noise.total == pytest.approx(0.25 * float(sigma_judge))
    assert noise.items == 3 and noise.items_by_component["llm_grading"] == 3
    # Item 0 goes .80 fail, .85 fail, .975 pass: the only flip of three items.
    assert noise.flip_share == pytest.approx(1 / 3)
    assert view["status"] == "completed" and view["noise"]["sigma_w_total"] == pytest.approx(0.25 * float(sigma_judge), abs=1e-6)
    assert view["progress"]["completed"] == 8 and view["progress"]["errored"] == 1
    with transaction() as s:
        assert s.scalar(select(func.count()).where(Score.calibration_run_id == run_id, Score.status == "completed")) == 8
        assert set(noise_of_run(s, run_id).sigma_w) == {"llm_grading", TOTAL_COMPONENT}
        assert [floor.run_id for floor in calibration.suite_noise(s, "kql")] == [run_id]
        assert calibration.suite_noise(s, "kql", "0" * 64) == []


def test_a_cancelled_run_reports_cancelled_and_stores_no_noise(clean_db):
    scored_items(2)
    run_id, batch_id = start(2, 2)
    with transaction() as s:
        batches.cancel(s, s.get(Batch, batch_id))
    with transaction() as s:
        view = calibration.run_view(s, calibration.get_run(s, "kql", run_id))
        assert view["status"] == "cancelled" and view["noise"] is None
        with pytest.raises(NotFound, match="no calibration run"):
            calibration.get_run(s, "kql_strict", run_id)
