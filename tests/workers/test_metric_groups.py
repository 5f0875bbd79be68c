"""Metric components travel a group of scores per message (each score's together), and every
component task message names its group for Flower: its id, its size and its first components."""

from __future__ import annotations

import json
import re
import uuid

from assay.scoring.pipeline.components import ComponentRef
from assay.settings import get_settings
from assay.workers.app import app
from assay.workers.metric_groups import describe_group, metric_groups
from assay.workers.tasks import enqueuer

METRICS = ("schema_match", "semantic_similarity", "results_match")


def _published(queue: str) -> list[tuple[list[list[str]], str]]:
    """Every message waiting in ``queue``, taken off it: (its refs argument, its argsrepr header)."""
    out = []
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            args, _, _ = json.loads(message.body) if isinstance(message.body, (str, bytes)) else message.body
            out.append((args[0], message.headers["argsrepr"]))
    return out


def _purge() -> None:
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("metrics")
        conn.default_channel.queue_purge("judge")


def test_a_scores_metric_components_travel_together_group_size_scores_per_message(clean_db):
    size = get_settings().metric_group_size
    scores = [uuid.uuid4() for _ in range(size + 5)]
    # Interleaved as a planner could hand them over: each score's components still travel together.
    refs = [ComponentRef(score, name, "metrics") for name in METRICS for score in scores]
    _purge()
    try:
        enqueuer.enqueue(refs)
        messages = _published("metrics")
    finally:
        _purge()
    assert [len(args) for args, _ in messages] == [3 * size, 3 * 5]
    sent = [(uuid.UUID(score), name) for args, _ in messages for score, name in args]
    assert sorted(sent) == sorted((ref.score_id, ref.component) for ref in refs)
    for args, _ in messages:
        in_message = {score for score, _ in args}
        assert all(sum(1 for score, _ in args if score == s) == 3 for s in in_message)
    first, last = messages
    assert re.fullmatch(
        rf"group [0-9a-f]{{8}}: {3 * size} components \(score {str(scores[0])[:8]}/schema_match, "
        rf"score {str(scores[0])[:8]}/semantic_similarity, score {str(scores[0])[:8]}/results_match, …\)",
        first[1],
    ), first[1]
    assert first[1].split(":")[0] != last[1].split(":")[0]  # each group its own id


def test_judge_group_messages_name_their_group_too(clean_db):
    refs = [ComponentRef(uuid.uuid4(), "llm_grading", "judge") for _ in range(get_settings().judge_group_size + 1)]
    _purge()
    try:
        enqueuer.enqueue(refs)
        messages = _published("judge")
    finally:
        _purge()
    assert [len(args) for args, _ in messages] == [len(refs) - 1, 1]
    assert messages[0][1].startswith("group ") and f": {len(refs) - 1} components (score {str(refs[0].score_id)[:8]}/llm_grading, " in messages[0][1]
    assert messages[1][1].endswith(f": 1 component (score {str(refs[-1].score_id)[:8]}/llm_grading)")


def test_grouping_and_description_edge_cases():
    assert metric_groups([], 4) == []
    one = [ComponentRef(uuid.uuid4(), "a", "metrics")]
    assert metric_groups(one, 1) == [one]
    a, b = uuid.uuid4(), uuid.uuid4()
    refs = [ComponentRef(a, "x", "metrics"), ComponentRef(b, "x", "metrics"), ComponentRef(a, "y", "metrics")]
    assert metric_groups(refs, 1) == [[refs[0], refs[2]], [refs[1]]]
    assert describe_group("abc", refs, {}, shown=2) == f"group abc: 3 components (score {str(a)[:8]}/x, score {str(b)[:8]}/x, …)"


# --- the group task, run in-process on the real store ----------------------------------------------------


def _metric_refs(batch_id):  # type: ignore[no-untyped-def]
    from tests.scoring.test_pipeline import plan_all

    return [ref for ref in plan_all(batch_id) if ref.queue == "metrics"]


def _landed() -> set[tuple[uuid.UUID, str]]:
    from sqlalchemy import select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import ScoreComponent

    with transaction() as session:
        rows = session.execute(
            select(ScoreComponent.score_id, ScoreComponent.component).where(ScoreComponent.landed_at.is_not(None))
        ).all()
    return {(row.score_id, row.component) for row in rows}


def test_a_group_lands_what_finished_before_a_slow_component_starts_and_validates_each_item_once(clean_db, monkeypatch):
    from assay.scoring.kinds import get_kind
    from assay.workers import metric_groups
    from tests.scoring.test_pipeline import make_batch

    batch_id, _ = make_batch(3)
    refs = _metric_refs(batch_id)
    assert len(refs) == 9
    seen: list[tuple[ComponentRef, set[tuple[uuid.UUID, str]]]] = []
    real_compute = metric_groups.compute
    clock = [1000.0]  # the group's clock: only the slow component moves it (the machine's load cannot)

    class FakeTime:
        @staticmethod
        def monotonic() -> float:
            return clock[0]

    def slow_compute(work, runtime):  # type: ignore[no-untyped-def]
        seen.append((work.ref, _landed()))
        if work.ref == refs[3]:
            clock[0] += metric_groups.LAND_EVERY_SECONDS + 0.5  # a slow item: it lands before the next starts
        return real_compute(work, runtime)

    validations = []
    kind = get_kind("kql")
    real_validate = kind.item_model.model_validate
    monkeypatch.setattr(kind.item_model, "model_validate", lambda payload: validations.append(1) or real_validate(payload))
    monkeypatch.setattr(metric_groups, "compute", slow_compute)
    monkeypatch.setattr(metric_groups, "time", FakeTime)
    requeued = []
    metric_groups.run_metric_group("task-1", [[str(r.score_id), r.component] for r in refs], lambda *a, **k: requeued.append(a))
    assert [ref for ref, _ in seen] == refs and not requeued
    keys = [(r.score_id, r.component) for r in refs]
    assert seen[3][1] == set()  # nothing landed before the slow one: no time had passed
    assert seen[4][1] == set(keys[:4])  # the slow one took longer than the landing interval: all four landed
    assert set(keys) <= _landed()
    assert len(validations) == 3  # one per item, shared by its three metric components


def test_a_group_does_not_start_a_component_whose_lease_it_no_longer_holds(clean_db, monkeypatch):
    from sqlalchemy import select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import ScoreComponent
    from assay.workers import leases, metric_groups
    from tests.scoring.test_pipeline import make_batch

    batch_id, _ = make_batch(2)
    refs = _metric_refs(batch_id)
    lost = refs[2]
    real_holds = leases.LeaseKeeper.holds
    monkeypatch.setattr(leases.LeaseKeeper, "holds", lambda self, owner, ref: ref != lost and real_holds(self, owner, ref))
    metric_groups.run_metric_group("task-2", [[str(r.score_id), r.component] for r in refs], lambda *a, **k: None)
    assert (lost.score_id, lost.component) not in _landed()
    assert {(r.score_id, r.component) for r in refs if r != lost} <= _landed()
    with transaction() as session:
        status, owner = session.execute(
            select(ScoreComponent.status, ScoreComponent.lease_owner).where(
                ScoreComponent.score_id == lost.score_id, ScoreComponent.component == lost.component
            )
        ).one()
    assert (status, owner) == ("in_progress", "task-2")  # left to its lease and the reconciler


def test_a_batch_group_hands_its_unstarted_components_back_when_online_work_waits(clean_db, monkeypatch):
    from sqlalchemy import select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Score, ScoreComponent
    from assay.workers import metric_groups as groups
    from tests.scoring.test_pipeline import make_batch, plan_all

    batch_id, _ = make_batch(2)
    refs = [ref for ref in plan_all(batch_id) if ref.queue == "metrics"]
    assert len(refs) == 6  # two KQL scores' three metrics
    monkeypatch.setattr(groups, "ONLINE_CHECK_SECONDS", 0.0)
    asked: list[int] = []
    sent: list[list[ComponentRef]] = []

    def online_waiting() -> bool:
        asked.append(1)
        return True

    pairs = [[str(ref.score_id), ref.component] for ref in refs]
    groups.run_metric_group("t1", pairs, lambda handed, countdown=None: sent.append(handed), "metrics", online_waiting)
    # One component computed (never none), the other five handed back at once in one message.
    assert asked == [1] and [len(handed) for handed in sent] == [5]
    assert set(sent[0]) == set(refs[1:])
    with transaction() as session:
        rows = {(row.score_id, row.component): row for row in session.scalars(select(ScoreComponent))}
        assert rows[(refs[0].score_id, refs[0].component)].landed_at is not None
        for ref in refs[1:]:
            row = rows[(ref.score_id, ref.component)]
            assert (row.status, row.reason, row.attempts, row.lease_owner) == ("deferred", groups.HANDED_BACK, 0, None)
    # The new message's task takes them: nothing lost, no attempt spent.
    groups.run_metric_group("t2", [[str(ref.score_id), ref.component] for ref in sent[0]], lambda *a, **k: None, "metrics")
    with transaction() as session:
        metrics = session.scalars(select(ScoreComponent).where(ScoreComponent.queue == "metrics")).all()
        assert len(metrics) == 6 and all(row.landed_at is not None and row.status in ("ok", "skipped") for row in metrics)
        assert all(score.components_landed == 3 for score in session.scalars(select(Score)))


def test_only_batch_groups_ask_whether_online_work_waits(clean_db, monkeypatch):
    from sqlalchemy import select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import ScoreComponent
    from assay.workers import metric_groups as groups
    from assay.workers import tasks
    from tests.scoring.test_pipeline import make_batch, plan_all

    batch_id, _ = make_batch(1)
    refs = [ref for ref in plan_all(batch_id) if ref.queue == "metrics"]
    monkeypatch.setattr(groups, "ONLINE_CHECK_SECONDS", 0.0)
    asked: list[str] = []
    monkeypatch.setattr(tasks, "_online_metrics_waiting", lambda: asked.append("asked") or True)
    # An online group (its own queue) runs whole, however much online work waits behind it.
    tasks.metric_components.apply(args=([[str(r.score_id), r.component] for r in refs],), kwargs={"queue": "online-metrics"}).get()
    assert asked == []
    with transaction() as session:
        landed = session.scalars(select(ScoreComponent.landed_at).where(ScoreComponent.component.in_(METRICS))).all()
        assert len(landed) == 3 and None not in landed
