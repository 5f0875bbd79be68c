"""A jury through the pipeline on the real store: its members are planned and published like any judge
component while the jury waits unpublished; it lands with the aggregate in the transaction of its last
member; a re-score that changes only the quorum carries every member over and re-aggregates at no
cost; a retried score re-judges only the member that failed, the jury waiting for it again. Members
landing at the same moment in separate transactions land their jury exactly once."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from assay.scoring import features  # noqa: F401  (registers the jury hook, as every landing process does)
from assay.scoring.intake import batches
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline import hooks
from assay.scoring.pipeline.claims import claim
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.landing import Landing, land, land_many
from assay.scoring.pipeline.planning import DERIVED_WAITING
from assay.scoring.store.db import get_engine, transaction
from assay.scoring.store.models import Batch, Item, Score, ScoreComponent
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import parse_suite
from assay.settings import get_settings
from tests.scoring.test_carry_over import rescore_run
from tests.scoring.test_pipeline import plan_all

SUITE = """
name: jury_pipeline
kind: generic
threshold: 0.5
components:
  exact:
    weight: 0.5
    metric: exact_match
    version: 1
  correct:
    weight: 0.5
    judge:
      rubric: Is the answer correct?
      verdict: {type: pass_fail}
      judges:
        - {provider: anthropic, model: claude-haiku-5-5}
        - {provider: anthropic, model: claude-sonnet-5-5}
        - {provider: anthropic, model: claude-opus-5-5, name: opus}
      aggregate: majority
      QUORUM
"""
MEMBERS = ("correct@claude-haiku-5-5", "correct@claude-sonnet-5-5", "correct@opus")


def register(quorum: int = 2) -> str:
    text = SUITE.replace("QUORUM", f"min_members: {quorum}")
    with transaction() as s:
        return register_suite(s, parse_suite(text, config_dir=get_settings().config_dir, env={}, origin="api"), origin="api")


def make_batch(criteria_hash: str, n: int = 2) -> uuid.UUID:
    with transaction() as s:
        batch = Batch(suite_name="jury_pipeline", criteria_hash=criteria_hash, created_by="t", total_items=n)
        s.add(batch)
        s.flush()
        for pos in range(1, n + 1):
            item = Item(kind="generic", payload={"input": "1+1?", "output": "2", "expected": "2"}, content_hash="0" * 64, origin_batch_id=batch.id)
            s.add(item)
            s.flush()
            s.add(Score(item_id=item.id, batch_id=batch.id, position=pos, suite_name="jury_pipeline",
                        criteria_hash=criteria_hash, components_total=5, triggered_by="t"))
        return batch.id


def verdict(ref: ComponentRef, failing: str | None = None) -> ComponentResult:
    if ref.queue != "judge":
        return ComponentResult.ok(1.0)
    if ref.component == failing:
        return ComponentResult.failed("the judge gave no usable verdict", cost_usd=0.001)
    passed = not ref.component.endswith("@opus")  # opus always disagrees
    return ComponentResult("ok", 1.0 if passed else 0.0, {"passed": passed, "reasoning": "r"}, usage={"output_tokens": 5}, cost_usd=0.01)


def land_one(ref: ComponentRef, result: ComponentResult) -> None:
    with transaction() as s:
        assert claim(s, ref, "w", 60).state == "claimed"
    with transaction() as s:
        assert land(s, ref, result)


def rows(batch_id: uuid.UUID) -> dict[tuple[uuid.UUID, str], ScoreComponent]:
    with transaction() as s:
        found = s.execute(select(ScoreComponent).join(Score, Score.id == ScoreComponent.score_id).where(Score.batch_id == batch_id)).scalars().all()
        for row in found:
            s.expunge(row)
        return {(row.score_id, row.component): row for row in found}


def score_rows(batch_id: uuid.UUID) -> list[Score]:
    with transaction() as s:
        found = s.scalars(select(Score).where(Score.batch_id == batch_id)).all()
        for row in found:
            s.expunge(row)
        return list(found)


@pytest.fixture
def jury(clean_db):  # type: ignore[no-untyped-def]
    return register()


def test_members_are_published_and_the_jury_lands_with_the_last_of_them(jury):
    batch_id = make_batch(jury)
    refs = plan_all(batch_id)
    judged = [r for r in refs if r.queue == "judge"]
    assert sorted({r.component for r in judged}) == sorted(MEMBERS)  # the jury itself is never published
    assert len(judged) == 2 * len(MEMBERS)
    waiting = [r for r in rows(batch_id).values() if r.component == "correct"]
    assert all(r.status == "deferred" and r.reason == DERIVED_WAITING and r.run_after is None for r in waiting)

    for ref in [r for r in refs if r.queue != "judge"] + judged[:-1]:
        land_one(ref, verdict(ref))
    last = judged[-1]
    # Every other member of the last ref's score has landed: only its landing lands the jury.
    assert rows(batch_id)[(last.score_id, "correct")].status == "deferred"
    land_one(last, verdict(last))

    found = rows(batch_id)
    for score in score_rows(batch_id):
        jury_row = found[(score.id, "correct")]
        assert jury_row.status == "ok" and jury_row.score == 1.0 and jury_row.weight == 0.5
        assert jury_row.details["jury"]["votes"] == {"true": 2.0, "false": 1.0}
        assert score.status == "completed" and score.total == pytest.approx(1.0) and score.passed
        assert score.components_landed == score.components_total == 5
        assert score.cost_usd == pytest.approx(0.03)  # the members' calls
    with transaction() as s:
        assert s.get(Batch, batch_id).status == "completed"


def test_a_rescore_that_changes_only_the_quorum_carries_the_members_and_re_aggregates(jury):
    batch_id = make_batch(jury)
    for ref in plan_all(batch_id):
        land_one(ref, verdict(ref))
    stricter = register(quorum=3)
    assert stricter != jury
    rerun = rescore_run("jury_pipeline")
    assert plan_all(rerun) == []  # nothing to compute: every member and metric carried over
    found = rows(rerun)
    for score in score_rows(rerun):
        assert score.criteria_hash == stricter and score.status == "completed" and score.passed
        assert all(found[(score.id, m)].carried_over_from is not None for m in MEMBERS)
        jury_row = found[(score.id, "correct")]
        assert jury_row.status == "ok" and jury_row.carried_over_from is None  # aggregated anew
        assert jury_row.details["jury"]["min_members"] == 3
        assert score.cost_usd == 0.0


def test_a_retry_re_judges_the_failed_member_and_the_jury_waits_for_it(clean_db):
    strict = register(quorum=3)
    batch_id = make_batch(strict, n=1)
    for ref in plan_all(batch_id):
        land_one(ref, verdict(ref, failing="correct@claude-sonnet-5-5"))
    (score,) = score_rows(batch_id)
    jury_row = rows(batch_id)[(score.id, "correct")]
    assert jury_row.status == "skipped"
    assert jury_row.reason.startswith("jury: 2 of 3 members answered, fewer than min_members 3 (claude-sonnet-5-5: failed")
    # The jury skipped leaves the metric: the score completes, partial, on it alone.
    assert score.status == "completed" and score.partial and score.total == pytest.approx(1.0)

    with transaction() as s:
        batch = s.get(Batch, batch_id)
        batch.status = "completed"
        score_row = s.get(Score, score.id)
        score_row.status = "failed"
        refs = batches.retry_failed(s, batch)
    assert [r.component for r in refs] == ["correct@claude-sonnet-5-5"]
    assert rows(batch_id)[(score.id, "correct")].status == "deferred"
    land_one(refs[0], verdict(refs[0]))
    jury_row = rows(batch_id)[(score.id, "correct")]
    assert jury_row.status == "ok" and jury_row.details["jury"]["answered"] == 3


def test_calibration_measures_each_member_and_the_jury(jury):
    from assay.scoring.suites.loader import load_model_catalog
    from assay.scoring.trust import calibration
    from assay.scoring.trust.noise import latest_noise

    for ref in plan_all(make_batch(jury)):
        land_one(ref, verdict(ref))
    with transaction() as s:
        plan = calibration.plan(s, "jury_pipeline", 2, 3, "realtime", load_model_catalog(get_settings().config_dir))
        assert plan.estimate.judge_calls == 2 * 3 * len(MEMBERS)  # each member, every repeat
        run = calibration.start(s, plan, created_by="t", lane="realtime", budget_usd=None)
        run_batch = run.batch_id
    refs = plan_all(run_batch)
    # Members are asked every repeat; the metric carries over; the jury waits for its members.
    assert sorted({r.component for r in refs}) == sorted(MEMBERS) and len(refs) == 2 * 3 * len(MEMBERS)
    with transaction() as s:
        repeat_of = dict(s.execute(select(Score.id, Score.calibration_repeat).where(Score.batch_id == run_batch)).all())
    for ref in refs:
        # haiku flips between repeats; sonnet always passes; opus always fails.
        passed = repeat_of[ref.score_id] % 2 == 1 if ref.component.endswith("haiku-5-5") else not ref.component.endswith("@opus")
        land_one(ref, ComponentResult("ok", 1.0 if passed else 0.0, {"passed": passed, "reasoning": "r"}))
    with transaction() as s:
        noise = latest_noise(s, jury)
    assert noise is not None
    assert noise.sigma_w["correct@claude-sonnet-5-5"] == 0.0 and noise.sigma_w["correct@opus"] == 0.0
    assert noise.sigma_w["correct@claude-haiku-5-5"] > 0
    # The jury follows haiku's swing: with sonnet for pass and opus against, haiku decides each repeat.
    assert noise.sigma_w["correct"] == pytest.approx(noise.sigma_w["correct@claude-haiku-5-5"])


def test_on_the_batch_lane_each_member_waits_for_its_own_provider_batch(jury):
    from sqlalchemy import update

    from assay.scoring.pipeline.planning import BATCH_LANE_WAITING
    from assay.scoring.judge.providers.registry import build_batch_apis
    from assay.scoring.rescoring import batch_lane
    from assay.scoring.suites.loader import load_model_catalog

    batch_id = make_batch(jury)
    with transaction() as s:
        s.execute(update(Batch).where(Batch.id == batch_id).values(judge_lane="batch"))
    assert {r.component for r in plan_all(batch_id)} == {"exact"}  # members wait for the submitter, the jury for them
    found = rows(batch_id)
    assert {r.reason for r in found.values() if r.component in MEMBERS} == {BATCH_LANE_WAITING}
    assert {r.reason for r in found.values() if r.component == "correct"} == {DERIVED_WAITING}
    with transaction() as s:
        assert sorted(batch_lane.waiting_groups(s)) == sorted((batch_id, m) for m in MEMBERS)
        catalog = load_model_catalog(get_settings().config_dir)
        # Batch APIs that are never called here (prepare only encodes requests): an address nothing listens on.
        apis = build_batch_apis(catalog, anthropic_key="test", anthropic_base_url="http://127.0.0.1:9", env={})
        prepared = batch_lane.prepare(s, batch_id, "correct@opus", catalog, apis, batch_lane.Limits(100, 10**9))
    assert len(prepared.requests) == 2 and {r["params"]["model"] for r in prepared.requests} == {"claude-opus-5-5"}


@pytest.mark.parametrize("scores_per_landing", [1, 5], ids=["one_at_a_time", "grouped"])
def test_members_landing_at_the_same_moment_land_their_jury_exactly_once(jury, monkeypatch, scores_per_landing):
    """Each score's three members and its metric land at once, from four threads, each in its own
    transaction on its own connection (a barrier starts them together), over 50 scores: every jury
    lands once, with the majority of all three members, and every score is finalized once. Without
    the lock on the score before the jury hook decides, landings that overlap each see the others'
    members as not landed yet and none lands the jury. ``grouped``: each transaction lands its
    component of five scores, as a worker landing a set of results does (the locking-read path)."""
    n = 50
    batch_id = make_batch(jury, n=n)
    refs = plan_all(batch_id)
    with transaction() as s:
        for ref in refs:
            assert claim(s, ref, "w", 60).state == "claimed"
    finalized: list[uuid.UUID] = []
    monkeypatch.setattr(hooks, "_scores_finalized", [*hooks._scores_finalized, lambda _s, done: finalized.extend(f.score_id for f in done)])

    components = ("exact", *MEMBERS)
    by_score: dict[uuid.UUID, dict[str, ComponentRef]] = {}
    for ref in refs:
        by_score.setdefault(ref.score_id, {})[ref.component] = ref
    score_ids = sorted(by_score)
    rounds = [score_ids[i : i + scores_per_landing] for i in range(0, n, scores_per_landing)]
    assert get_engine().pool.size() >= len(components)  # one connection per thread: they really overlap
    barrier = threading.Barrier(len(components), timeout=60)

    def land_component(component: str) -> int:
        landed = 0
        try:
            for group in rounds:
                with transaction() as s:
                    s.connection()  # the transaction has begun on its own connection before the start
                    barrier.wait()
                    landed += len(land_many(s, [Landing(by_score[i][component], verdict(by_score[i][component])) for i in group]))
        except BaseException:
            barrier.abort()  # the other threads stop at once rather than wait for this one
            raise
        return landed

    with ThreadPoolExecutor(len(components)) as pool:
        landed = list(pool.map(land_component, components))
    assert landed == [n] * len(components)

    found = rows(batch_id)
    for score in score_rows(batch_id):
        jury_row = found[(score.id, "correct")]
        assert jury_row.status == "ok" and jury_row.score == 1.0 and jury_row.landed_at is not None
        assert jury_row.details["jury"]["votes"] == {"true": 2.0, "false": 1.0} and jury_row.details["jury"]["answered"] == 3
        # Counted once: a second landing of the jury would count past the total and never finalize.
        assert score.components_landed == score.components_total == 5
        assert score.status == "completed" and score.passed and score.total == pytest.approx(1.0)
    assert sorted(finalized) == score_ids  # each score finalized once
    with transaction() as s:
        assert s.get(Batch, batch_id).status == "completed"
