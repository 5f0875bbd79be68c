"""The lease heartbeat on the real store: a live task's short leases are renewed while it runs them
and no longer; a lease it lost is not worked on; the store going away stops new work before the lease
could run out."""

from __future__ import annotations

import time
from collections.abc import Collection

from sqlalchemy import select

from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.claims import claim_many, renew_leases
from assay.scoring.pipeline.landing import land
from assay.scoring.pipeline.reconcile import reconcile
from assay.scoring.store.db import transaction
from assay.scoring.store.models import ScoreComponent, utcnow
from assay.workers.leases import LeaseKeeper, heartbeat_interval
from tests.scoring.test_pipeline import make_batch, plan_all

LEASE = 2.0


def renew(owners: Collection[str]) -> set[tuple[object, str, str]]:
    with transaction() as session:
        return renew_leases(session, owners, judge_seconds=LEASE, metrics_seconds=LEASE)


def claim(refs, owner: str) -> None:
    with transaction() as session:
        claims = claim_many(session, refs, owner, LEASE)
    assert {c.state for c in claims.values()} == {"claimed"}


def lost_by_the_reconciler() -> set:
    with transaction() as session:
        return set(reconcile(session, requeue_after_seconds=3600).refs)


def test_leases_are_renewed_while_the_task_runs_them_and_not_after(clean_db):
    batch_id, _ = make_batch(1)
    refs = plan_all(batch_id)
    keeper = LeaseKeeper(renew, interval=LEASE / 4)
    claim(refs, "task-1")
    with keeper.holding("task-1", refs, LEASE):
        time.sleep(LEASE * 2)  # twice the lease: only the heartbeat keeps it
        assert not lost_by_the_reconciler() & set(refs)
        assert all(keeper.holds("task-1", ref) for ref in refs)
        with transaction() as session:
            expiries = session.scalars(select(ScoreComponent.lease_expires_at)).all()
        assert all(e > utcnow() for e in expiries)
    # The task ended: its leases are left to run out, and the reconciler takes the work up again.
    time.sleep(LEASE + 0.5)
    assert set(refs) <= lost_by_the_reconciler()


def test_a_lease_found_taken_or_landed_is_not_worked_on(clean_db):
    batch_id, _ = make_batch(1)
    taken, landed, kept = plan_all(batch_id)[:3]
    keeper = LeaseKeeper(renew, interval=LEASE / 4)
    claim([taken, landed, kept], "task-1")
    with keeper.holding("task-1", [taken, landed, kept], LEASE):
        with transaction() as session:  # another worker took one over (as after an expiry) ...
            session.execute(
                ScoreComponent.__table__.update()
                .where(ScoreComponent.score_id == taken.score_id, ScoreComponent.component == taken.component)
                .values(lease_owner="task-2")
            )
            land(session, landed, ComponentResult.ok(1.0))  # ... one landed
        keeper.renew_now()
        assert not keeper.holds("task-1", taken) and not keeper.holds("task-1", landed)
        assert keeper.holds("task-1", kept)
        with transaction() as session:
            owner = session.scalar(
                select(ScoreComponent.lease_owner).where(
                    ScoreComponent.score_id == taken.score_id, ScoreComponent.component == taken.component
                )
            )
        assert owner == "task-2"


def test_without_the_store_no_work_starts_once_the_lease_could_have_run_out(clean_db):
    batch_id, _ = make_batch(1)
    ref = plan_all(batch_id)[0]
    claim([ref], "task-1")

    def unreachable(owners: Collection[str]) -> set[tuple[object, str, str]]:
        raise ConnectionError("the store is down")

    keeper = LeaseKeeper(unreachable, interval=LEASE / 4)
    with keeper.holding("task-1", [ref], LEASE):
        assert keeper.holds("task-1", ref)
        time.sleep(LEASE * 0.8)  # the beats failed: less than a beat of the lease is left
        assert not keeper.holds("task-1", ref)


def test_the_heartbeat_beats_four_times_a_lease():
    assert heartbeat_interval(60, 60) == 15.0
    assert heartbeat_interval(60, 8) == 2.0
