"""Re-scores pay only for what changed, on the real store: a component whose fingerprint is unchanged
carries its landed result over from the item's previous score (no cost, never enqueued); a changed or
failed one is computed again; counts, finalizing and batch completion stay right; planning twice
changes nothing."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from assay.scoring.intake import batches
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.components import ComponentRef, pending_score
from assay.scoring.pipeline.landing import land
from assay.scoring.pipeline.planning import create_components
from assay.scoring.rescoring import rescore
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Score, ScoreComponent, utcnow
from assay.scoring.suites.criteria import current_suite, load_criteria, register_suite
from assay.scoring.suites.loader import load_model_catalog, load_suite, parse_suite
from assay.settings import get_settings
from tests.scoring.test_pipeline import make_batch, plan_all

CONFIG = get_settings().config_dir
KQL_YAML = (CONFIG / "suites" / "kql.yaml").read_text()
METRICS = ("results_match", "schema_match", "semantic_similarity")
JUDGE = "llm_grading"


def register_kql(*edits: tuple[str, str]) -> str:
    """Register the kql suite with text edits of its YAML (each must apply); returns the new hash."""
    text = KQL_YAML
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    with transaction() as s:
        return register_suite(s, parse_suite(text, config_dir=CONFIG, env={}, source="kql.yaml"))


THRESHOLD = ("threshold: 0.9", "threshold: 0.5")  # criteria change that touches no component
SIMILARITY_ARGS = ("      tables: 0.4\n      filters: 0.3", "      tables: 0.5\n      filters: 0.2")
JUDGE_MODEL = ("${ASSAY_KQL_JUDGE_MODEL:-claude-haiku-5-5}", "claude-sonnet-5-5")


@pytest.fixture
def kql(clean_db):  # type: ignore[no-untyped-def]
    register_kql()
    yield
    with transaction() as s:
        register_suite(s, load_suite(CONFIG, "kql", env={}))


def result_for(ref: ComponentRef, judge: ComponentResult | None = None) -> ComponentResult:
    """Distinct, recognisable results: each metric 0.5 with its own note; the judge as given (ok 0.8)."""
    if ref.queue == "judge":
        return judge or ComponentResult.ok(0.8, {"reasoning": "fine", "model": "m", "calls": 1})
    return ComponentResult.ok(0.5, {"note": ref.component})


def land_refs(refs: list[ComponentRef], judge: dict[uuid.UUID, ComponentResult] | None = None) -> None:
    for ref in refs:
        with transaction() as s:
            assert claim(s, ref, "w", 60).state == "claimed"
        result = result_for(ref, (judge or {}).get(ref.score_id))
        if ref.queue == "judge" and result.status == "ok":
            result = ComponentResult("ok", result.score, result.details, usage={"input_tokens": 100, "output_tokens": 10}, cost_usd=0.01)
        with transaction() as s:
            land(s, ref, result)


def rescore_run(suite: str = "kql") -> uuid.UUID:
    """A manual re-score run (stale and never-scored items) as the worker builds it; returns its batch
    (not planned yet)."""
    selection = rescore.Selection()
    with transaction() as s:
        batch_id = rescore.begin_run(
            s, suite, selection, triggered_by="test", lane="realtime", budget_usd=None, scheduled=False
        ).id
    after = None
    while True:
        with transaction() as s:
            after = rescore.add_wave(s, batch_id, selection, after, 100)
        if after is None:
            break
    with transaction() as s:
        assert rescore.finish_building(s, batch_id)
    return batch_id


def components(batch_id: uuid.UUID) -> dict[tuple[uuid.UUID, str], ScoreComponent]:
    """The batch's components by (item id, component)."""
    with transaction() as s:
        rows = s.execute(
            select(Score.item_id, ScoreComponent).join(Score, Score.id == ScoreComponent.score_id).where(Score.batch_id == batch_id)
        ).all()
        for _, comp in rows:
            s.expunge(comp)
        return {(item_id, comp.component): comp for item_id, comp in rows}


def scores(batch_id: uuid.UUID) -> dict[uuid.UUID, Score]:
    with transaction() as s:
        rows = s.scalars(select(Score).where(Score.batch_id == batch_id)).all()
        for row in rows:
            s.expunge(row)
        return {row.item_id: row for row in rows}


def first_batch(n: int = 2, judge: dict[int, ComponentResult] | None = None) -> tuple[uuid.UUID, dict[uuid.UUID, Score]]:
    """A batch of n kql items scored under the current criteria: metrics ok 0.5, judge ok 0.8 unless given
    (by position, from 1)."""
    batch_id, score_ids = make_batch(n)
    by_score = {score_ids[pos - 1]: result for pos, result in (judge or {}).items()}
    land_refs(plan_all(batch_id), by_score)
    return batch_id, scores(batch_id)


def test_only_the_changed_component_is_computed_again(kql):
    _, old = first_batch(2)
    register_kql(SIMILARITY_ARGS)
    run = rescore_run()
    refs = plan_all(run)
    assert sorted((r.component, r.queue) for r in refs) == [("semantic_similarity", "metrics")] * 2
    comps = components(run)
    for item_id, before in old.items():
        for name in ("results_match", "schema_match", JUDGE):
            comp = comps[(item_id, name)]
            assert comp.status == "ok" and comp.carried_over_from == before.id
            assert comp.score == (0.8 if name == JUDGE else 0.5)
            assert comp.details == ({"reasoning": "fine", "model": "m", "calls": 1} if name == JUDGE else {"note": name})
            assert (comp.cost_usd, comp.usage, comp.attempts) == (0.0, None, 0)
            assert comp.landed_at is not None and comp.weighted_score == pytest.approx(comp.score * comp.weight)
        assert comps[(item_id, "semantic_similarity")].status == "pending"
        assert comps[(item_id, "semantic_similarity")].carried_over_from is None
    new = scores(run)
    assert {row.components_landed for row in new.values()} == {3}
    assert {row.status for row in new.values()} == {"pending"}

    land_refs(refs)
    new = scores(run)
    assert {row.status for row in new.values()} == {"completed"}
    # The judge's spend was the first score's; the re-score paid for nothing (metrics are free here).
    assert {row.cost_usd for row in new.values()} == {0.0}
    assert [old_row.cost_usd for old_row in old.values()] == pytest.approx([0.01, 0.01])
    assert [row.total for row in new.values()] == pytest.approx([0.25 * (0.5 * 3 + 0.8)] * 2)
    with transaction() as s:
        assert s.get(Batch, run).status == "completed"


def test_a_changed_judge_is_asked_again_and_the_metrics_carry(kql):
    first_batch(1)
    register_kql(JUDGE_MODEL)
    run = rescore_run()
    refs = plan_all(run)
    assert [(r.component, r.queue) for r in refs] == [(JUDGE, "judge")]
    assert {name for (_, name), comp in components(run).items() if comp.carried_over_from} == set(METRICS)


def test_a_score_whose_every_component_carries_finalizes_at_planning(kql):
    _, old = first_batch(2)
    new_hash = register_kql(THRESHOLD)
    run = rescore_run()
    assert plan_all(run) == [], "nothing to compute, nothing enqueued"
    new = scores(run)
    for item_id, row in new.items():
        assert (row.status, row.criteria_hash, row.components_landed) == ("completed", new_hash, 4)
        assert row.total == pytest.approx(old[item_id].total)
        # Same total, new threshold: 0.575 fails 0.9 and passes 0.5.
        assert (old[item_id].passed, row.passed) == (False, True)
        assert row.cost_usd == 0.0 and row.usage is None
    with transaction() as s:
        batch = s.get(Batch, run)
        assert batch.status == "completed" and batch.finished_at is not None
        assert batch.summary["counts"]["passed"] == 2


def test_failed_components_and_skipped_judges_are_not_carried(kql):
    failed = ComponentResult.failed("judge answered garbage", raw_output="{{{")
    skipped = ComponentResult.skipped("no Anthropic API key is configured: the judge was not run")
    _, old = first_batch(3, judge={1: failed, 2: skipped})
    by_position = {row.position: item_id for item_id, row in old.items()}
    assert (old[by_position[1]].status, old[by_position[2]].partial) == ("failed", True)
    register_kql(THRESHOLD)
    run = rescore_run()
    refs = plan_all(run)
    new = scores(run)
    asked = {ref.score_id for ref in refs}
    assert all(ref.component == JUDGE for ref in refs)
    assert asked == {new[by_position[1]].id, new[by_position[2]].id}, "the third item's judge landed ok: carried"
    assert new[by_position[3]].status == "completed"
    comps = components(run)
    assert comps[(by_position[1], JUDGE)].raw_output is None and comps[(by_position[1], JUDGE)].status == "pending"
    assert all(comps[(by_position[p], name)].carried_over_from == old[by_position[p]].id for p in (1, 2) for name in METRICS)


def test_a_skipped_metric_carries(kql):
    batch_id, _ = make_batch(1)
    refs = plan_all(batch_id)
    skipped = ComponentResult.skipped("no dataset: nothing to execute", pass_blocker="the query was not executed")
    for ref in refs:
        with transaction() as s:
            claim(s, ref, "w", 60)
            land(s, ref, skipped if ref.component == "results_match" else result_for(ref))
    register_kql(THRESHOLD)
    run = rescore_run()
    assert plan_all(run) == []
    (row,) = scores(run).values()
    comp = components(run)[(row.item_id, "results_match")]
    assert (comp.status, comp.reason, comp.details) == ("skipped", skipped.reason, skipped.details)
    assert row.status == "completed" and row.passed is False and "not executed" in row.error_message


def test_planning_again_changes_nothing(kql):
    first_batch(1)
    register_kql(SIMILARITY_ARGS)
    run = rescore_run()
    refs = plan_all(run)
    (row,) = scores(run).values()
    with transaction() as s:
        again = create_components(s, [(row.id, row.criteria_hash)], utcnow(), carry_over=True)
    assert again == refs, "the component still to compute is published again (a lost message), nothing else"
    assert scores(run)[row.item_id].components_landed == 3
    land_refs(refs)
    with transaction() as s:
        create_components(s, [(row.id, row.criteria_hash)], utcnow(), carry_over=True)
    after = scores(run)[row.item_id]
    assert (after.status, after.components_landed) == ("completed", 4)


def test_a_chain_of_rescores_names_the_score_that_computed_the_result(kql):
    _, old = first_batch(1)
    ((item_id, original),) = old.items()
    register_kql(SIMILARITY_ARGS)
    second = rescore_run()
    land_refs(plan_all(second))
    register_kql(SIMILARITY_ARGS, THRESHOLD)
    third = rescore_run()
    assert plan_all(third) == []
    comps = components(third)
    second_id = scores(second)[item_id].id
    assert comps[(item_id, "semantic_similarity")].carried_over_from == second_id
    assert comps[(item_id, "schema_match")].carried_over_from == original.id


def test_only_rescores_carry_over(kql):
    """A first score, or a forced one (sessions), computes everything: carry-over is asked for."""
    _, old = first_batch(1)
    ((item_id, before),) = old.items()
    with transaction() as s:
        score = Score(**pending_score(
            item_id=item_id, suite="kql", criteria_hash=before.criteria_hash,
            criteria=load_criteria(s, before.criteria_hash), triggered_by="t", created_at=utcnow(),
        ))
        s.add(score)
        s.flush()
        refs = create_components(s, [(score.id, score.criteria_hash)], utcnow())
    assert len(refs) == 4


def test_estimate_counts_one_call_per_judge_component_left_to_pay(kql):
    first_batch(3, judge={1: ComponentResult.failed("judge answered garbage")})
    catalog = load_model_catalog(CONFIG)
    new_hash = register_kql(THRESHOLD)
    with transaction() as s:
        record = current_suite(s, "kql")
        where = rescore.candidates(record, rescore.Selection())
        estimate = rescore.estimate(s, new_hash, "kql", where, catalog, "realtime")
    assert (estimate.items, estimate.judge_calls, estimate.carried_over) == (3, 1, 2)
    assert any("carried over" in note for note in estimate.notes)
    new_hash = register_kql(JUDGE_MODEL)
    with transaction() as s:
        record = current_suite(s, "kql")
        estimate = rescore.estimate(s, new_hash, "kql", rescore.candidates(record, rescore.Selection()), catalog, "realtime")
    assert (estimate.items, estimate.judge_calls, estimate.carried_over) == (3, 3, 0)
    assert estimate.cost_usd > 0


def test_the_score_api_and_the_item_page_show_what_was_carried(kql, api_client):
    from fastapi.testclient import TestClient

    from tests.dashboard.support import make_app, post_sign_in

    _, old = first_batch(1)
    ((item_id, before),) = old.items()
    register_kql(JUDGE_MODEL)
    run = rescore_run()
    plan_all(run)
    body = api_client.get(f"/api/v1/items/{item_id}").json()
    (scored,) = [s for s in body["scores"] if s["batch_id"] == str(run)]
    comps = scored["components"]
    assert {name: c["carried_over_from"] for name, c in comps.items()} == {
        **{name: str(before.id) for name in METRICS},
        JUDGE: None,
    }
    assert comps["schema_match"]["details"] == {"note": "schema_match"}

    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as browser:
        signed = post_sign_in(browser)
        assert signed.status_code == 303
        page = browser.get(f"/dashboard/items/{item_id}").text
    assert page.count(f"carried over unchanged from score {str(before.id)[:8]}") == len(METRICS)


def test_each_judge_component_keeps_its_raw_output_and_a_retry_forgets_copies(kql):
    batch_id, _ = make_batch(1)
    skipped = ComponentResult.skipped("no dataset: nothing to execute", pass_blocker="the query was not executed")
    garbage = {"judge": ComponentResult.failed("judge answered garbage", raw_output="{{{"), "results_match": skipped}
    for ref in plan_all(batch_id):
        with transaction() as s:
            claim(s, ref, "w", 60)
            land(s, ref, garbage.get(ref.queue) or garbage.get(ref.component) or result_for(ref))
    (first,) = scores(batch_id).values()
    assert components(batch_id)[(first.item_id, JUDGE)].raw_output == "{{{" == first.raw_judge_output

    register_kql(THRESHOLD)
    run = rescore_run()
    (ref,) = plan_all(run)
    with transaction() as s:
        claim(s, ref, "w", 60)
        land(s, ref, ComponentResult.failed("judge answered garbage again", raw_output="[[["))
    comps = components(run)
    assert comps[(first.item_id, JUDGE)].raw_output == "[[["
    assert comps[(first.item_id, "results_match")].carried_over_from == first.id
    assert scores(run)[first.item_id].status == "failed"

    with transaction() as s:
        refs = batches.retry_failed(s, s.get(Batch, run))
    assert sorted(r.component for r in refs) == [JUDGE, "results_match"]
    comps = components(run)
    for name in (JUDGE, "results_match"):
        assert (comps[(first.item_id, name)].status, comps[(first.item_id, name)].raw_output) == ("pending", None)
        assert comps[(first.item_id, name)].carried_over_from is None
    land_refs(refs)
    comps = components(run)
    assert comps[(first.item_id, "results_match")].carried_over_from is None, "computed by the retry"
    assert scores(run)[first.item_id].status == "completed"
