"""Re-scoring on the real store: stale detection across criteria changes, never-scored and partial items,
waves, idempotency, the estimate, and budgets."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select, update

from assay.scoring.errors import BadRequest, Conflict, CriteriaError
from assay.scoring.intake import batches
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.budgets import stop_for_budget
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.landing import land
from assay.scoring.pipeline.planning import plan_chunk
from assay.scoring.rescoring import rescore
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Item, Score, SuiteRecord
from assay.scoring.suites.criteria import current_suite, register_suite
from assay.scoring.suites.loader import load_model_catalog, load_suite
from assay.settings import get_settings
from tests.scoring.test_pipeline import make_batch, plan_all

CONFIG = get_settings().config_dir


def switch_model(model: str) -> str:
    """Change the kql suite's criteria (its judge model) and return the new current hash."""
    with transaction() as s:
        return register_suite(s, load_suite(CONFIG, "kql", env={"ASSAY_KQL_JUDGE_MODEL": model}))


def complete_all(batch_id: uuid.UUID, *, judge: ComponentResult | None = None) -> None:
    """Plan and land every component of a batch (metrics 1.0; the judge as given, default ok 1.0)."""
    for ref in plan_all(batch_id):
        with transaction() as s:
            assert claim(s, ref, "w", 60).state == "claimed"
        result = (judge or ComponentResult.ok(1.0)) if ref.queue == "judge" else ComponentResult.ok(1.0)
        with transaction() as s:
            land(s, ref, result)


def run(selection: rescore.Selection = rescore.Selection(), *, wave: int = 2, budget: float | None = None) -> uuid.UUID | None:
    """A whole manual run as the worker does it: begin, waves, finish. Returns the batch id (None: nothing)."""
    with transaction() as s:
        batch = rescore.begin_run(
            s, "kql", selection, triggered_by="test", lane="realtime", budget_usd=budget, scheduled=False
        )
        batch_id = batch.id
    after = None
    while True:
        with transaction() as s:
            after = rescore.add_wave(s, batch_id, selection, after, wave)
        if after is None:
            break
    with transaction() as s:
        return batch_id if rescore.finish_building(s, batch_id) else None


def candidates(selection: rescore.Selection = rescore.Selection()) -> set[uuid.UUID]:
    with transaction() as s:
        record = current_suite(s, "kql")
        return set(s.scalars(select(Item.id).where(rescore.candidates(record, selection))))


def scores_of(item_id: uuid.UUID) -> list[tuple[str, str]]:
    with transaction() as s:
        return [(h, st) for h, st in s.execute(select(Score.criteria_hash, Score.status).where(Score.item_id == item_id).order_by(Score.created_at))]


@pytest.fixture
def restore_kql(clean_db):  # type: ignore[no-untyped-def]
    yield
    switch_model("claude-haiku-5-5")


def test_stale_detection_across_two_criteria_changes_keeps_history(restore_kql):
    h1 = switch_model("claude-haiku-5-5")
    batch_id, _ = make_batch(3)
    complete_all(batch_id)
    with transaction() as s:
        items = list(s.scalars(select(Score.item_id).where(Score.batch_id == batch_id).order_by(Score.position)))
    assert candidates() == set(), "nothing is stale under the criteria that scored it"

    h2 = switch_model("claude-sonnet-5-5")
    assert h2 != h1
    assert candidates() == set(items) == candidates(rescore.Selection(stale_only=True))
    run_id = run(wave=2)  # 3 items in waves of 2
    with transaction() as s:
        batch = s.get(Batch, run_id)
        assert (batch.total_items, batch.status, batch.criteria_hash) == (3, "planning", h2)
        assert batch.summary["rescore"] == {"selection": "stale + never scored", "scheduled": False}
    assert candidates() == set(), "pending scores under the new hash cover their items"
    assert run() is None, "a second run creates nothing (and leaves no empty batch)"
    complete_all(run_id)

    h3 = switch_model("claude-opus-5-5")
    assert len({h1, h2, h3}) == 3
    assert candidates() == set(items)
    third = run(wave=10)
    complete_all(third)
    for item_id in items:
        assert scores_of(item_id) == [(h1, "completed"), (h2, "completed"), (h3, "completed")]
    assert candidates() == set()


def test_never_scored_failed_cancelled_and_partial_items(restore_kql):
    switch_model("claude-haiku-5-5")
    ok_batch, _ = make_batch(1)
    complete_all(ok_batch)
    failed_batch, _ = make_batch(1)
    complete_all(failed_batch, judge=ComponentResult.failed("judge said no"))
    partial_batch, _ = make_batch(1)
    complete_all(partial_batch, judge=ComponentResult.skipped("no Anthropic API key"))
    cancelled_batch, _ = make_batch(1)
    with transaction() as s:
        batches.cancel(s, s.get(Batch, cancelled_batch))
        ids = {b: s.scalar(select(Score.item_id).where(Score.batch_id == b)) for b in (ok_batch, failed_batch, partial_batch, cancelled_batch)}
        assert s.scalar(select(Score.partial).where(Score.batch_id == partial_batch)) is True

    # Under the same criteria: a failed score covers its item (retry-failed is its path), the cancelled
    # one never scored does not; partial ones only when asked.
    assert candidates() == {ids[cancelled_batch]}
    assert candidates(rescore.Selection(stale_only=True)) == set()
    assert candidates(rescore.Selection(stale_only=True, partial=True)) == {ids[partial_batch]}

    switch_model("claude-sonnet-5-5")
    # Stale: completed under the old hash (the partial one too); never scored: failed and cancelled.
    assert candidates(rescore.Selection(stale_only=True)) == {ids[ok_batch], ids[partial_batch]}
    assert candidates() == set(ids.values())


def test_session_versions_only_the_current_completed_one_is_taken(clean_db):
    from assay.scoring.sessions.items import KIND_NAME

    with transaction() as s:
        record = current_suite(s, "alert_session")
        old = Item(kind=KIND_NAME, external_id="s-1", payload={"status": "completed"}, content_hash="1" * 64)
        s.add(old)
        s.flush()
        new = Item(kind=KIND_NAME, external_id="s-1", payload={"status": "completed"}, content_hash="2" * 64)
        running = Item(kind=KIND_NAME, external_id="s-2", payload={"status": "in_progress"}, content_hash="3" * 64)
        s.add_all([new, running])
        s.flush()
        s.execute(update(Item).where(Item.id == new.id).values(created_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, 1)))
        taken = set(s.scalars(select(Item.id).where(rescore.candidates(record, rescore.Selection()))))
    assert taken == {new.id}


def test_waves_tolerate_a_concurrent_score_and_a_criteria_change_mid_run(restore_kql):
    switch_model("claude-haiku-5-5")
    batch_id, _ = make_batch(4)
    complete_all(batch_id)
    switch_model("claude-sonnet-5-5")
    with transaction() as s:
        run_batch = rescore.begin_run(s, "kql", rescore.Selection(), triggered_by="t", lane="realtime", budget_usd=None, scheduled=False)
        run_id = run_batch.id
    with transaction() as s:
        after = rescore.add_wave(s, run_id, rescore.Selection(), None, 2)
    # The criteria change between two waves: the run stops; the next run uses the new hash.
    switch_model("claude-opus-5-5")
    with transaction() as s:
        assert rescore.add_wave(s, run_id, rescore.Selection(), after, 2) is None
        assert s.get(Batch, run_id).total_items == 2


def test_estimate_counts_calls_tokens_and_halves_on_the_batch_lane(restore_kql):
    switch_model("claude-haiku-5-5")
    batch_id, _ = make_batch(5)
    complete_all(batch_id)
    switch_model("claude-sonnet-5-5")
    catalog = load_model_catalog(CONFIG)
    with transaction() as s:
        record = current_suite(s, "kql")
        where = rescore.candidates(record, rescore.Selection())
        realtime = rescore.estimate(s, record.current_criteria_hash, "kql", where, catalog, "realtime")
        batch_lane = rescore.estimate(s, record.current_criteria_hash, "kql", where, catalog, "batch")
    assert (realtime.items, realtime.judge_calls) == (5, 5)
    assert realtime.input_tokens > 5 * 50  # the rendered rubric and item
    # make_batch's judge components landed without usage, so output is bounded by max_tokens (1024).
    assert realtime.output_basis == "max_tokens" and realtime.output_tokens == 5 * 1024
    price = catalog.models["claude-sonnet-5-5"]
    assert realtime.cost_usd >= 5 * 1024 * price.output_per_mtok / 1e6
    assert batch_lane.cost_usd == pytest.approx(realtime.cost_usd * price.batch_discount)
    # A run asked for on the batch lane whose judge's provider has no batch API is refused up front
    # (the suite's own default lane was checked when it was validated; a request may ask for another).
    no_batches = catalog.model_copy(
        update={"providers": {**catalog.providers, "anthropic": catalog.providers["anthropic"].model_copy(update={"batch": False})}}
    )
    with transaction() as s, pytest.raises(CriteriaError, match="judge provider 'anthropic' .* has no batch API"):
        rescore.estimate(s, record.current_criteria_hash, "kql", where, no_batches, "batch")


# --- budgets ------------------------------------------------------------------------------------------------


def test_budget_stops_judge_calls_keeps_finished_scores_and_resumes(clean_db):
    batch_id, _ = make_batch(4)
    with transaction() as s:
        s.execute(update(Batch).where(Batch.id == batch_id).values(budget_usd=0.01))
    refs = plan_all(batch_id)
    judge = [r for r in refs if r.queue == "judge"]
    # The first judgment costs the whole budget.
    with transaction() as s:
        first = claim(s, judge[0], "w", 60, check_budget=True)
        assert first.state == "claimed" and not first.budget_spent
    with transaction() as s:
        land(s, judge[0], ComponentResult("ok", 1.0, {}, cost_usd=0.012))
    with transaction() as s:
        assert s.get(Batch, batch_id).spent_usd == pytest.approx(0.012)
        second = claim(s, judge[1], "w2", 60, check_budget=True)
        assert second.state == "claimed" and second.budget_spent
        stop_for_budget(s, judge[1], "w2")
    with transaction() as s:
        batch = s.get(Batch, batch_id)
        assert batch.status == "budget_exhausted"
        stopped = s.get(Score, judge[1].score_id)
        assert (stopped.status, stopped.error_kind) == ("cancelled", "budget_exhausted")
        assert s.get(Score, judge[0].score_id).status == "in_progress"  # its metrics still run
    for ref in [r for r in refs if r.queue == "metrics" and r.score_id == judge[0].score_id]:
        with transaction() as s:
            assert claim(s, ref, "w", 60).state == "claimed"
        with transaction() as s:
            land(s, ref, ComponentResult.ok(1.0))
    with transaction() as s:
        assert s.get(Score, judge[0].score_id).status == "completed"

    with transaction() as s:
        with pytest.raises(BadRequest):
            batches.resume(s, s.get(Batch, batch_id), 0.005)  # not above the spend
    with transaction() as s:
        resumed = batches.resume(s, s.get(Batch, batch_id), 1.0)
        assert resumed.scores == 1 and not resumed.needs_planner
        # The judge component goes back to work; its score's metrics that had not landed too.
        assert {(r.score_id, r.component) for r in resumed.refs} >= {(judge[1].score_id, "llm_grading")}
        batch = s.get(Batch, batch_id)
        assert (batch.status, batch.budget_usd) == ("running", 1.0)
    with transaction() as s:
        with pytest.raises(Conflict):
            batches.resume(s, s.get(Batch, batch_id), 2.0)  # running: nothing to resume


def test_budget_exhausted_before_planning_finished_cancels_the_unplanned_rest(clean_db):
    batch_id, score_ids = make_batch(5)
    with transaction() as s:
        s.execute(update(Batch).where(Batch.id == batch_id).values(budget_usd=0.001, spent_usd=0.002))
        step = plan_chunk(s, batch_id, chunk_size=2)  # two scores planned, three not
    ref = next(r for r in step.refs if r.queue == "judge")
    with transaction() as s:
        claim(s, ref, "w", 60)
        stop_for_budget(s, ref, "w")
    with transaction() as s:
        batch = s.get(Batch, batch_id)
        assert batch.status == "budget_exhausted" and batch.finished_at is None  # one planned score is left
        assert s.scalar(select(func.count()).where(Score.batch_id == batch_id, Score.status == "cancelled")) == 4
        assert plan_chunk(s, batch_id, 10).refs == []  # the planner stops
    with transaction() as s:
        resumed = batches.resume(s, s.get(Batch, batch_id), None)
        assert resumed.scores == 4 and resumed.needs_planner
        batch = s.get(Batch, batch_id)
        assert (batch.status, batch.budget_usd, batch.finished_at) == ("planning", None, None)
    refs = plan_all(batch_id)
    assert {r.score_id for r in refs} == set(score_ids[2:])


def test_the_rescore_option_is_operational_not_criteria():
    base = load_suite(CONFIG, "kql", env={})
    assert base.options.rescore.lane == "realtime" and base.options.rescore.nightly
    import yaml

    raw = yaml.safe_load((CONFIG / "suites" / "kql.yaml").read_text())
    raw["rescore"] = {"lane": "batch", "budget_usd": 5, "nightly": False}
    from assay.scoring.suites.loader import parse_suite

    changed = parse_suite(yaml.safe_dump(raw), config_dir=CONFIG, env={})
    assert changed.criteria_hash == base.criteria_hash
    assert changed.options.rescore.lane == "batch" and changed.options.rescore.budget_usd == 5
    with pytest.raises(Exception, match="lane"):
        raw["rescore"] = {"lane": "carrier-pigeon"}
        parse_suite(yaml.safe_dump(raw), config_dir=CONFIG, env={})


def test_disabled_suites_and_nightly_false_are_left_out(clean_db):
    with transaction() as s:
        names = {r.name for r in rescore.suites_to_rescore(s)}
        assert "kql" in names
        s.execute(update(SuiteRecord).where(SuiteRecord.name == "kql").values(options={"enabled": True, "rescore": {"nightly": False}}))
        s.execute(update(SuiteRecord).where(SuiteRecord.name == "kql_strict").values(options={"enabled": False}))
        names = {r.name for r in rescore.suites_to_rescore(s)}
        assert "kql" not in names and "kql_strict" not in names
        s.rollback()
