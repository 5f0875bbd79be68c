"""The pipeline's state machine on the real store: leases, single landing, finalizing, reconciling."""

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select, text, update

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.claims import claim as pipeline_claim
from assay.scoring.pipeline.claims import claim_many, defer
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.landing import Landing, land, land_many
from assay.scoring.pipeline.planning import plan_chunk
from assay.scoring.pipeline.reconcile import expire_poison, note_planner_waiting, reconcile
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Item, Score, ScoreComponent, utcnow
from assay.scoring.suites.criteria import current_suite

PAYLOAD = {
    "prompt": "p",
    "generated_kql": "T | take 1",
    "expected_kql": "T | take 1",
    "expected_columns": ["a"],
    "generated_columns": ["a"],
}


def make_batch(n: int = 2, payload: dict | None = None) -> tuple[uuid.UUID, list[uuid.UUID]]:
    with transaction() as s:
        suite = current_suite(s, "kql")
        batch = Batch(suite_name="kql", criteria_hash=suite.current_criteria_hash, created_by="t", total_items=n)
        s.add(batch)
        s.flush()
        from assay.scoring.suites.criteria import load_criteria

        ncomp = len(load_criteria(s, suite.current_criteria_hash).components)
        score_ids = []
        for pos in range(1, n + 1):
            item = Item(kind="kql", payload=payload or PAYLOAD, content_hash="0" * 64, origin_batch_id=batch.id)
            s.add(item)
            s.flush()
            score = Score(
                item_id=item.id, batch_id=batch.id, position=pos, suite_name="kql",
                criteria_hash=suite.current_criteria_hash, components_total=ncomp, triggered_by="t",
            )
            s.add(score)
            s.flush()
            score_ids.append(score.id)
        return batch.id, score_ids


def plan_all(batch_id) -> list[ComponentRef]:
    refs = []
    while True:
        with transaction() as s:
            step = plan_chunk(s, batch_id, chunk_size=1)
        refs += step.refs
        if step.finished:
            return refs


def land_all(refs, result_for=lambda ref: ComponentResult.ok(1.0)):
    for ref in refs:
        with transaction() as s:
            assert pipeline_claim(s, ref, "w", 60).state == "claimed"
        with transaction() as s:
            land(s, ref, result_for(ref))


def test_planner_creates_components_in_chunks_and_resumes(clean_db):
    batch_id, scores = make_batch(3)
    with transaction() as s:
        first = plan_chunk(s, batch_id, chunk_size=2)
    assert {r.score_id for r in first.refs} == set(scores[:2]) and not first.finished
    with transaction() as s:
        assert s.get(Batch, batch_id).planned_position == 2
    with transaction() as s:
        second = plan_chunk(s, batch_id, chunk_size=2)
    assert {r.score_id for r in second.refs} == {scores[2]} and not second.finished
    assert plan_all(batch_id) == []
    with transaction() as s:
        assert s.get(Batch, batch_id).status == "running"
    queues = {r.component: r.queue for r in first.refs}
    assert queues["llm_grading"] == "judge" and queues["schema_match"] == "metrics"


def test_claim_lease_and_duplicate_delivery(clean_db):
    batch_id, _ = make_batch(1)
    ref = plan_all(batch_id)[0]
    with transaction() as s:
        assert pipeline_claim(s, ref, "worker-a", 60).state == "claimed"
    with transaction() as s:
        busy = pipeline_claim(s, ref, "worker-b", 60)
    assert busy.state == "busy" and 50 < busy.retry_in <= 60
    # The same message redelivered after its worker died takes the lease back.
    with transaction() as s:
        again = pipeline_claim(s, ref, "worker-a", 60)
    assert again.state == "claimed" and again.attempts == 2
    with transaction() as s:
        assert land(s, ref, ComponentResult.ok(0.5)) is True
    with transaction() as s:
        assert land(s, ref, ComponentResult.ok(0.9)) is False  # lands once
        assert pipeline_claim(s, ref, "worker-c", 60).state == "landed"
        comp = s.get(ScoreComponent, (ref.score_id, ref.component))
        assert comp.score == 0.5
        assert s.get(Score, ref.score_id).components_landed == 1


def test_claim_many_claims_what_it_can_in_one_go_and_says_why_not_for_the_rest(clean_db):
    batch_id, _ = make_batch(4)
    refs = [ref for ref in plan_all(batch_id) if ref.component == "llm_grading"]
    landed, leased, deferred, free = refs
    gone = ComponentRef(uuid.uuid4(), "llm_grading", "judge")
    with transaction() as s:
        pipeline_claim(s, leased, "other-task", 60)
        land(s, landed, ComponentResult.ok(1.0))
        assert pipeline_claim(s, deferred, "other-task", 60).state == "claimed"
        defer(s, deferred, "other-task", 30, "breaker open")
    with transaction() as s:
        claims = claim_many(s, [landed, leased, gone, deferred, free], "group-task", 60, check_budget=True)
    assert list(claims) == [landed, leased, gone, deferred, free]  # the caller's order
    assert {ref: c.state for ref, c in claims.items()} == {
        landed: "landed", leased: "busy", gone: "missing", deferred: "busy", free: "claimed",
    }
    assert 50 < claims[leased].retry_in <= 60 and 20 < claims[deferred].retry_in <= 30
    assert claims[free].attempts == 1 and not claims[free].budget_spent and not claims[free].budgeted
    with transaction() as s:
        assert s.get(Score, free.score_id).status == "in_progress"


def test_expired_lease_can_be_taken_over(clean_db):
    batch_id, _ = make_batch(1)
    ref = plan_all(batch_id)[0]
    with transaction() as s:
        pipeline_claim(s, ref, "dead-worker", 60)
        s.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    with transaction() as s:
        assert pipeline_claim(s, ref, "other", 60).state == "claimed"


def test_score_finalizes_when_last_component_lands_and_batch_completes(clean_db):
    batch_id, scores = make_batch(2)
    refs = plan_all(batch_id)
    land_all(refs, lambda ref: ComponentResult.ok(0.8 if ref.component == "schema_match" else 1.0))
    with transaction() as s:
        for sid in scores:
            score = s.get(Score, sid)
            assert score.status == "completed" and score.components_landed == score.components_total
        batch = s.get(Batch, batch_id)
        assert batch.status == "completed" and batch.finished_at is not None
        assert batch.summary["counts"]["completed"] == 2
        assert batch.summary["components"]["schema_match"]["mean"] == pytest.approx(0.8)
        assert batch.summary["components"]["schema_match"]["median"] == pytest.approx(0.8)


def test_a_batch_whose_completion_check_was_lost_is_completed_by_the_reconciler(clean_db):
    from assay.scoring.store.db import new_session

    batch_id, _ = make_batch(1)
    *first, last = plan_all(batch_id)
    land_all(first)
    with transaction() as s:
        assert pipeline_claim(s, last, "w", 60).state == "claimed"
    session = new_session()  # commits without running the after-commit check: a worker dying right then
    with session.begin():
        land(session, last, ComponentResult.ok(1.0))
    session.close()
    with transaction() as s:
        assert s.get(Batch, batch_id).status == "running"
        assert reconcile(s, requeue_after_seconds=30).finished_batches == [batch_id]
    with transaction() as s:
        batch = s.get(Batch, batch_id)
        assert batch.status == "completed" and batch.summary["counts"]["completed"] == 1
        assert reconcile(s, requeue_after_seconds=30).finished_batches == []


def test_after_commit_actions_run_once_after_a_commit_and_never_after_a_rollback(clean_db, caplog):
    from assay.scoring.store.db import after_commit

    ran: list[str] = []
    with transaction() as s:
        after_commit(s, "k", lambda: ran.append("first"))
        after_commit(s, "k", lambda: ran.append("second"))  # same key: once
        after_commit(s, "boom", lambda: 1 / 0)  # logged; the commit stands
        assert ran == []
    assert ran == ["second"] and "after-commit action boom failed" in caplog.text
    with pytest.raises(RuntimeError), transaction() as s:
        after_commit(s, "k", lambda: ran.append("rolled back"))
        raise RuntimeError("the work failed")
    assert ran == ["second"]


def test_after_commit_actions_gathered_run_once_per_key_when_the_block_ends(clean_db):
    from assay.scoring.store.db import after_commit, after_commits_gathered

    ran: list[str] = []
    with pytest.raises(RuntimeError), after_commits_gathered():
        for n in range(3):  # three commits, one batch: checked once
            with transaction() as s:
                after_commit(s, ("finish_batch", "b1"), lambda n=n: ran.append(f"b1 after commit {n}"))
        with pytest.raises(ZeroDivisionError), transaction() as s:
            after_commit(s, ("finish_batch", "b2"), lambda: ran.append("b2"))
            1 / 0  # rolled back: its action never runs
        assert ran == []  # held until the block ends
        raise RuntimeError("a group ends with an exception")
    assert ran == ["b1 after commit 2"]  # still run when the block ends with an exception


def test_total_is_the_weighted_sum(clean_db):
    batch_id, scores = make_batch(1)
    refs = plan_all(batch_id)
    values = {r.component: v for r, v in zip(refs, [0.2, 0.4, 0.6, 0.8, 1.0, 1.0])}
    land_all(refs, lambda ref: ComponentResult.ok(values[ref.component]))
    with transaction() as s:
        score = s.get(Score, scores[0])
        comps = s.scalars(select(ScoreComponent).where(ScoreComponent.score_id == score.id)).all()
        expected = sum(c.score * c.weight for c in comps)
        assert score.total == pytest.approx(expected)
        assert score.partial is False
        for c in comps:
            assert c.weighted_score == pytest.approx(c.score * c.weight)


def test_landing_a_set_records_each_component_once_and_finalizes_the_scores_it_completes(clean_db):
    batch_id, scores = make_batch(2)
    refs = plan_all(batch_id)
    first = [ref for ref in refs if ref.score_id == scores[0]]
    second = [ref for ref in refs if ref.score_id == scores[1]]
    with transaction() as s:
        assert land(s, first[0], ComponentResult.ok(0.5))  # a duplicate run landed this one first
    paid = ComponentResult("ok", 1.0, usage={"input_tokens": 10}, cost_usd=0.25)
    landings = [Landing(ref, paid) for ref in first]
    with transaction() as s:
        landed = land_many(s, [*landings, Landing(second[0], ComponentResult.failed("boom"))])
    assert landed == {*first[1:], second[0]}
    with transaction() as s:  # again, as a redelivered message would: nothing lands twice
        assert land_many(s, landings) == set()
    with transaction() as s:
        done = s.get(Score, scores[0])
        comps = {c.component: c for c in s.scalars(select(ScoreComponent).where(ScoreComponent.score_id == scores[0]))}
        kept = comps[first[0].component]
        assert kept.score == 0.5 and kept.cost_usd == 0.0  # not overwritten by the second landing
        assert done.status == "completed" and done.components_landed == len(first)
        weights = sum(c.weight for c in comps.values())
        assert done.total == pytest.approx(sum(c.score * c.weight for c in comps.values()) / weights)
        assert done.cost_usd == pytest.approx(0.25 * (len(first) - 1))
        assert done.usage == {"input_tokens": 10 * (len(first) - 1)}
        waiting = s.get(Score, scores[1])
        assert waiting.components_landed == 1 and waiting.completed_at is None  # not finalized


def _score_versions_written(s) -> int:
    """Row versions written to ``scores`` (each UPDATE of a row writes one) by this backend, counting
    from a point in its transaction: PostgreSQL 15 may still hold earlier transactions' counts here."""
    return s.execute(text("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'scores'")).scalar_one()


def test_a_landing_writes_one_version_of_each_score_it_counts_on_its_final_one_included(clean_db):
    # With autovacuum off every version written is a dead row left behind: a landing counts a score's
    # components in one write, and the landing that completes a score counts them in its final row.
    batch_id, scores = make_batch(3)
    refs = plan_all(batch_id)
    with transaction() as s:
        claim_many(s, refs, "w", 60)
    first, second, third = ([ref for ref in refs if ref.score_id == score_id] for score_id in scores)
    judged = ComponentResult.failed("judge answered garbage", raw_output="{{{")
    with transaction() as s:  # the first score's components but one, the second's all, the third's first two
        landings = [Landing(ref, ComponentResult.ok(1.0)) for ref in [*first[:-1], *second[:-1], third[0]]]
        landings += [Landing(second[-1], judged), Landing(third[1], ComponentResult.ok(0.5))]
        before = _score_versions_written(s)
        assert len(land_many(s, landings)) == len(landings)
        assert _score_versions_written(s) - before == 3
    with transaction() as s:
        before = _score_versions_written(s)
        assert land(s, first[-1], ComponentResult.ok(1.0))
        assert _score_versions_written(s) - before == 1
    with transaction() as s:
        done, failed, waiting = (s.get(Score, score_id) for score_id in scores)
        assert done.status == "completed" and done.components_landed == len(first) and done.total == pytest.approx(1.0)
        assert failed.status == "failed" and failed.components_landed == len(second)
        assert failed.raw_judge_output == "{{{" and failed.error_kind == "component_failed"
        assert waiting.status == "in_progress" and waiting.components_landed == 2 and waiting.completed_at is None


def test_skipped_component_renormalises_and_marks_partial(clean_db):
    batch_id, scores = make_batch(1)
    refs = plan_all(batch_id)
    land_all(
        refs,
        lambda ref: ComponentResult.skipped("no key") if ref.component == "llm_grading" else ComponentResult.ok(0.6),
    )
    with transaction() as s:
        score = s.get(Score, scores[0])
        assert score.status == "completed" and score.partial is True
        assert score.total == pytest.approx(0.6)  # renormalised over the rest, not dragged down by a zero
        assert score.passed is False


def test_failed_component_fails_the_score_without_renormalising(clean_db):
    batch_id, scores = make_batch(1)
    refs = plan_all(batch_id)
    land_all(
        refs,
        lambda ref: ComponentResult.failed("judge answered garbage", raw_output="{{{")
        if ref.component == "llm_grading"
        else ComponentResult.ok(1.0),
    )
    with transaction() as s:
        score = s.get(Score, scores[0])
        assert score.status == "failed" and score.total is None and score.passed is False
        assert "llm_grading: judge answered garbage" in score.error_message
        assert score.raw_judge_output == "{{{"
        assert s.get(Batch, batch_id).summary["counts"]["errored"] == 1


def test_deferral_does_not_spend_an_attempt_and_waits(clean_db):
    batch_id, _ = make_batch(1)
    ref = next(r for r in plan_all(batch_id) if r.component == "llm_grading")
    with transaction() as s:
        pipeline_claim(s, ref, "w", 60)
        defer(s, ref, "w", 30, "breaker open")
    with transaction() as s:
        comp = s.get(ScoreComponent, (ref.score_id, ref.component))
        assert comp.status == "deferred" and comp.attempts == 0
        busy = pipeline_claim(s, ref, "w2", 60)
        assert busy.state == "busy" and 25 < busy.retry_in <= 30
        report = reconcile(s, requeue_after_seconds=5)
        assert ref not in report.refs  # deferred on purpose: the reconciler leaves it alone


def test_poison_component_fails_after_max_attempts(clean_db):
    batch_id, scores = make_batch(1)
    ref = plan_all(batch_id)[0]
    for attempt in range(1, 4):
        with transaction() as s:
            claim = pipeline_claim(s, ref, f"w{attempt}", 60)
            assert claim.attempts == attempt
            poisoned = expire_poison(s, ref, claim.attempts, max_attempts=2)
            s.execute(
                update(ScoreComponent)
                .where(ScoreComponent.score_id == ref.score_id, ScoreComponent.component == ref.component)
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            ) if not poisoned else None
    assert poisoned
    with transaction() as s:
        comp = s.get(ScoreComponent, (ref.score_id, ref.component))
        assert comp.status == "failed" and "gave up after 2 attempts" in comp.reason


def test_a_component_that_outlived_its_lease_each_time_times_its_score_out_when_it_lands_last_or_first(clean_db):
    batch_id, scores = make_batch(2)
    refs = plan_all(batch_id)
    for score_id, lands_last in zip(scores, (True, False), strict=True):
        *rest, poison = [ref for ref in refs if ref.score_id == score_id]
        if lands_last:
            land_all(rest)
        with transaction() as s:  # claimed past the limit, no error recorded: every run died or ran too long
            s.execute(
                update(ScoreComponent)
                .where(ScoreComponent.score_id == score_id, ScoreComponent.component == poison.component)
                .values(attempts=2)
            )
        with transaction() as s:
            assert expire_poison(s, poison, pipeline_claim(s, poison, "w", 60).attempts, max_attempts=2)
        if not lands_last:
            land_all(rest)
        with transaction() as s:
            score = s.get(Score, score_id)
            assert score.status == "timed_out" and score.error_kind == "timed_out"
            assert score.components_landed == len(refs) // 2
            assert f"{poison.component}: gave up after 2 attempts" in score.error_message


def test_reconciler_finds_lost_work(clean_db):
    batch_id, _ = make_batch(1)
    refs = plan_all(batch_id)
    leased, stale, fresh = refs[0], refs[1], refs[2]
    with transaction() as s:
        pipeline_claim(s, leased, "dead", 60)
        s.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id == leased.score_id, ScoreComponent.component == leased.component)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
        s.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id == stale.score_id, ScoreComponent.component == stale.component)
            .values(enqueued_at=utcnow() - timedelta(seconds=60))
        )
    with transaction() as s:
        report = reconcile(s, requeue_after_seconds=30)
    assert leased in report.refs and stale in report.refs
    assert fresh not in report.refs
    with transaction() as s:  # re-enqueueing stamps them: an immediate second pass finds nothing stale
        again = reconcile(s, requeue_after_seconds=30)
    assert stale not in again.refs


def test_reconciler_restarts_planning_batches(clean_db):
    batch_id, _ = make_batch(2)
    with transaction() as s:
        assert reconcile(s, requeue_after_seconds=30).planning_batches == [batch_id]


def test_reconciler_leaves_a_live_planner_alone(clean_db):
    batch_id, _ = make_batch(3)
    with transaction() as s:
        plan_chunk(s, batch_id, chunk_size=1)  # a planner at work checks in
    with transaction() as s:
        assert reconcile(s, requeue_after_seconds=30).planning_batches == []
    with transaction() as s:  # ... and one silent for longer than requeue_after is restarted
        s.execute(update(Batch).where(Batch.id == batch_id).values(planner_seen_at=utcnow() - timedelta(seconds=60)))
    with transaction() as s:
        assert reconcile(s, requeue_after_seconds=30).planning_batches == [batch_id]
    with transaction() as s:
        note_planner_waiting(s, batch_id)  # waiting on backpressure counts as alive
    with transaction() as s:
        assert reconcile(s, requeue_after_seconds=30).planning_batches == []


def test_planner_waits_for_a_batch_row_a_landing_holds(clean_db):
    """The check that completes a batch locks its row for a moment; a planner arriving then must wait
    and plan, not give up and leave the batch planning forever."""
    import threading

    from assay.scoring.store.db import new_session

    batch_id, _ = make_batch(2)
    holder = new_session()
    holder.begin()
    holder.execute(select(Batch.id).where(Batch.id == batch_id).with_for_update())
    steps = []

    def plan() -> None:
        with transaction() as s:
            steps.append(plan_chunk(s, batch_id, chunk_size=10))

    thread = threading.Thread(target=plan)
    thread.start()
    thread.join(timeout=1.0)
    assert thread.is_alive(), "the planner waits for the row"
    holder.commit()
    holder.close()
    thread.join(timeout=30)
    assert len(steps) == 1 and not steps[0].finished and len(steps[0].refs) == 8


def test_reconciler_leaves_pending_work_of_a_backlogged_queue_alone(clean_db):
    """A stale pending component whose queue still holds messages is not lost: re-sending it would only
    lengthen the queue. Once the queue is empty, the same component is re-sent."""
    batch_id, _ = make_batch(1)
    refs = plan_all(batch_id)
    with transaction() as s:
        s.execute(update(ScoreComponent).values(enqueued_at=utcnow() - timedelta(hours=1)))
    with transaction() as s:
        backlogged = reconcile(s, requeue_after_seconds=60, skip_pending_in={"metrics"})
        s.rollback()  # not re-sent: the next look finds them stale again
    assert {r.queue for r in backlogged.refs} == {"judge"}
    with transaction() as s:
        drained = reconcile(s, requeue_after_seconds=60, skip_pending_in=())
    assert {(r.score_id, r.component) for r in drained.refs} == {(r.score_id, r.component) for r in refs}


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_judge_claim_reads_whether_the_batch_spent_its_budget(backend, request, tmp_path):
    from contextlib import contextmanager

    from sqlalchemy.orm import Session

    from assay.scoring.store.db import make_engine, migrate
    from assay.scoring.store.models import CriteriaDefinition

    if backend == "postgresql":
        request.getfixturevalue("clean_db")
        tx, engine = transaction, None
    else:  # the embedded store: SQLAlchemy renders RETURNING differently there
        url = f"sqlite:///{tmp_path / 'claim.db'}"
        migrate(url)
        engine = make_engine(url)

        @contextmanager
        def tx():  # type: ignore[no-untyped-def]
            with Session(engine, expire_on_commit=False) as session, session.begin():
                yield session

    def component(session, budget: float | None, spent: float, status: str = "running") -> ComponentRef:  # type: ignore[no-untyped-def]
        if session.get(CriteriaDefinition, "a" * 64) is None:
            session.add(CriteriaDefinition(criteria_hash="a" * 64, criteria_content={}))
            session.flush()
        batch = Batch(suite_name="kql", criteria_hash="a" * 64, created_by="t", total_items=1, status=status,
                      budget_usd=budget, spent_usd=spent)
        item = Item(kind="kql", payload=PAYLOAD, content_hash="0" * 64)
        session.add_all([batch, item])
        session.flush()
        score = Score(item_id=item.id, batch_id=batch.id, suite_name="kql", criteria_hash="a" * 64,
                      components_total=1, triggered_by="t")
        session.add(score)
        session.flush()
        session.add(ScoreComponent(score_id=score.id, component="llm_grading", queue="judge", status="pending",
                                   weight=1.0, attempts=0, cost_usd=0.0))
        return ComponentRef(score.id, "llm_grading", "judge")

    with tx() as s:
        no_budget = component(s, None, 5.0)
        within = component(s, 1.0, 0.5)
        spent = component(s, 1.0, 1.0)
        stopped = component(s, 2.0, 0.1, status="budget_exhausted")
        unchecked = component(s, 1.0, 1.0)
    with tx() as s:
        seen = {
            name: pipeline_claim(s, ref, "w", 60, check_budget=name != "unchecked")
            for name, ref in [("no_budget", no_budget), ("within", within), ("spent", spent),
                              ("stopped", stopped), ("unchecked", unchecked)]
        }
    assert {name: c.state for name, c in seen.items()} == dict.fromkeys(seen, "claimed")
    assert {name for name, c in seen.items() if c.budget_spent} == {"spent", "stopped"}
    # An unchecked claim cannot tell, so it says budgeted (a landing then counts the spend).
    assert {name for name, c in seen.items() if c.budgeted} == {"within", "spent", "stopped", "unchecked"}
    if engine is not None:
        engine.dispose()
