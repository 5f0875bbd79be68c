"""``compare_batches`` on a small known case: every count, mean, interval end and flag.

Suite ``s1``, criteria H (components a, b). Totals are binary fractions, so means are exact.

    ext   batch A                         batch B                          pair
    e1    0.5  fail  a.5  b.5             0.75 pass  a1   b.5              +.25 fail→pass
    e2    1.0  pass  a1   b1              0.5  fail  a.5  b.5              −.5  pass→fail
    e3    0.75 pass  a.5  b1              1.0  pass  a1   b– (skipped)     +.25
    e4    0.25 fail  a.25 b.25            0.5  fail  a.25 b.75             +.25
    e10   0.75 pass  a.5  b1              0.75 pass  a.5  b1               0 (tie)
    e5    0.5  partial                    1.0  pass                        excluded
    e6    failed                          0.5  fail                        excluded
    e7    1.0  pass                       –                                only in A
    –     0.5  pass (no external id)      –
    e11   calibration repeat (ignored)    –
    e8    –                               pending                          only in B
    e9    –                               two items, both e9 (repeated)
"""

from __future__ import annotations

import hashlib
import math
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.store.db import transaction
from assay.scoring.store.models import (
    Batch,
    CalibrationRun,
    CriteriaDefinition,
    Item,
    NoiseEstimate,
    Score,
    ScoreComponent,
    SuiteRecord,
)
from assay.scoring.trust import compare, stats

H = hashlib.sha256(b"compare criteria").hexdigest()
H2 = hashlib.sha256(b"compare criteria 2").hexdigest()
T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


def _batch(session: Session, criteria_hash: str = H, suite: str = "s1", status: str = "completed") -> uuid.UUID:
    batch = Batch(suite_name=suite, criteria_hash=criteria_hash, status=status, created_by="test", total_items=0)
    session.add(batch)
    session.flush()
    return batch.id


def _score(
    session: Session,
    batch_id: uuid.UUID,
    external_id: str | None,
    total: float | None,
    passed: bool | None,
    components: dict[str, float | None] | None = None,
    *,
    status: str = "completed",
    partial: bool = False,
    criteria_hash: str = H,
    calibration_run_id: uuid.UUID | None = None,
) -> None:
    item = Item(kind="generic", external_id=external_id, payload={}, content_hash="0" * 64)
    session.add(item)
    session.flush()
    row = Score(
        item_id=item.id, batch_id=batch_id, suite_name="s1", criteria_hash=criteria_hash, status=status, total=total,
        passed=passed, partial=partial, components_total=len(components or {}), components_landed=len(components or {}),
        triggered_by="test", completed_at=T0 if status == "completed" else None,
        calibration_run_id=calibration_run_id, calibration_repeat=1 if calibration_run_id else None,
    )
    session.add(row)
    session.flush()
    for name, value in (components or {}).items():
        session.add(
            ScoreComponent(
                score_id=row.id, component=name, queue="judge", status="ok" if value is not None else "skipped",
                score=value, weight=0.5, weighted_score=None if value is None else value / 2,
            )
        )


def seed(session: Session, *, b_hash: str = H, b_suite: str = "s1") -> tuple[uuid.UUID, uuid.UUID]:
    for criteria_hash in (H, H2):
        session.add(
            CriteriaDefinition(
                criteria_hash=criteria_hash,
                criteria_content={"kind": "generic", "threshold": 0.7, "components": {"a": {}, "b": {}}},
            )
        )
    session.flush()
    for name in ("s1", "s2"):
        session.add(SuiteRecord(name=name, kind="generic", current_criteria_hash=H, options={}))
    a, b = _batch(session), _batch(session, b_hash, b_suite)
    _score(session, a, "e1", 0.5, False, {"a": 0.5, "b": 0.5})
    _score(session, a, "e2", 1.0, True, {"a": 1.0, "b": 1.0})
    _score(session, a, "e3", 0.75, True, {"a": 0.5, "b": 1.0})
    _score(session, a, "e4", 0.25, False, {"a": 0.25, "b": 0.25})
    _score(session, a, "e10", 0.75, True, {"a": 0.5, "b": 1.0})
    _score(session, a, "e5", 0.5, False, partial=True)
    _score(session, a, "e6", None, None, status="failed")
    _score(session, a, "e7", 1.0, True)
    _score(session, a, None, 0.5, True)
    run = CalibrationRun(suite_name="s1", criteria_hash=H, sample=1, repeats=2, status="completed", created_by="test")
    session.add(run)
    session.flush()
    _score(session, a, "e11", 0.0, False, calibration_run_id=run.id)
    _score(session, b, "e1", 0.75, True, {"a": 1.0, "b": 0.5}, criteria_hash=b_hash)
    _score(session, b, "e2", 0.5, False, {"a": 0.5, "b": 0.5}, criteria_hash=b_hash)
    _score(session, b, "e3", 1.0, True, {"a": 1.0, "b": None}, criteria_hash=b_hash)
    _score(session, b, "e4", 0.5, False, {"a": 0.25, "b": 0.75}, criteria_hash=b_hash)
    _score(session, b, "e10", 0.75, True, {"a": 0.5, "b": 1.0}, criteria_hash=b_hash)
    _score(session, b, "e5", 1.0, True, criteria_hash=b_hash)
    _score(session, b, "e6", 0.5, False, criteria_hash=b_hash)
    _score(session, b, "e8", None, None, status="pending", criteria_hash=b_hash)
    _score(session, b, "e9", 1.0, True, criteria_hash=b_hash)
    _score(session, b, "e9", 0.5, False, criteria_hash=b_hash)
    return a, b


def add_noise(session: Session, criteria_hash: str, sigmas: dict[str, float | None], at: datetime = T0) -> uuid.UUID:
    run = CalibrationRun(suite_name="s1", criteria_hash=criteria_hash, sample=5, repeats=3, status="completed", created_by="test")
    session.add(run)
    session.flush()
    for name, sigma in sigmas.items():
        session.add(
            NoiseEstimate(
                calibration_run_id=run.id, component=name, criteria_hash=criteria_hash, suite_name="s1", sigma_w=sigma,
                items=5, repeats=3, flip_share=0.2 if name == "__total__" else None, computed_at=at,
            )
        )
    session.flush()
    return run.id


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    compare.clear_cache()


def test_known_case(clean_db: None) -> None:
    with transaction() as session:
        a, b = seed(session)
    with transaction() as session:
        result = compare.compare_batches(session, a, b)
    assert result.warnings == []
    assert (result.matched, result.paired, result.excluded) == (7, 5, 2)
    assert result.a.counts == compare.SideCounts(
        scores=9, usable=7, partial=1, failed=1, pending=0, cancelled=0, no_external_id=1, repeated_external_id=0, only_here=1
    )
    assert result.b.counts == compare.SideCounts(
        scores=10, usable=9, partial=0, failed=0, pending=1, cancelled=0, no_external_id=0, repeated_external_id=2, only_here=1
    )
    assert (result.a.only_here_ids, result.b.only_here_ids) == (["e7"], ["e8"])

    total = result.total
    assert (total.n, total.mean_a, total.mean_b) == (5, 0.65, 0.7)
    assert total.difference.mean == pytest.approx(0.05)  # (.25 − .5 + .25 + .25 + 0) / 5
    assert total.difference == stats.paired_bootstrap([0.25, -0.5, 0.25, 0.25, 0.0])
    assert total.difference.ci_low < 0.05 < total.difference.ci_high
    assert (total.noise_floor, total.beyond_noise, total.noise_note) == (None, None, stats.NO_NOISE_FLOOR)
    assert result.tally == stats.Tally(wins=3, ties=1, losses=1)

    assert (result.pass_rate.mean_a, result.pass_rate.mean_b, result.pass_rate.difference.mean) == (0.6, 0.6, 0.0)
    assert result.pass_rate.noise_note is None  # no noise-floor formula for a pass rate
    assert result.mcnemar == stats.McNemar(pass_to_fail=1, fail_to_pass=1, discordant=2, p_value=1.0)

    comps = {c.name: (c.n, c.mean_a, c.mean_b, c.difference.mean) for c in result.components}
    assert comps["a"][:3] == (5, 0.55, 0.65) and comps["a"][3] == pytest.approx(0.1)
    assert comps["b"] == (4, 0.6875, 0.6875, 0.0)  # e3's b skipped under B
    assert result.components_only_a == result.components_only_b == []

    assert [r.external_id for r in result.moved_most] == ["e2", "e1", "e3", "e4", "e10"]
    assert [(r.external_id, r.flip, r.delta) for r in result.flipped] == [("e1", "fail→pass", 0.25), ("e2", "pass→fail", -0.5)]
    assert result.item_noise_floor is None and all(r.beyond_noise is None for r in result.moved_most)


def test_noise_floor_beside_every_mean_difference(clean_db: None) -> None:
    with transaction() as session:
        a, b = seed(session)
        add_noise(session, H, {"__total__": 0.1, "a": 0.2, "b": None})
    with transaction() as session:
        result = compare.compare_batches(session, a, b)
    assert result.a.noise is not None and result.b.noise is result.a.noise
    assert result.total.noise_floor == pytest.approx(1.96 * 0.1 * math.sqrt(2 / 5))  # 0.12396
    assert result.total.beyond_noise is False and result.total.noise_note is None
    comps = {c.name: c for c in result.components}
    assert comps["a"].noise_floor == pytest.approx(1.96 * 0.2 * math.sqrt(2 / 5))
    assert comps["a"].beyond_noise is False
    assert (comps["b"].noise_floor, comps["b"].noise_note) == (None, stats.NO_NOISE_FLOOR)
    assert result.item_noise_floor == pytest.approx(1.96 * 0.1 * math.sqrt(2))  # 0.2772
    assert {r.external_id: r.beyond_noise for r in result.moved_most} == {
        "e2": True, "e1": False, "e3": False, "e4": False, "e10": False,
    }


def test_two_hashes_and_suites_warn_and_need_both_floors(clean_db: None) -> None:
    with transaction() as session:
        a, b = seed(session, b_hash=H2, b_suite="s2")
        add_noise(session, H, {"__total__": 0.3})
    with transaction() as session:
        result = compare.compare_batches(session, a, b)
    assert len(result.warnings) == 2
    assert "different suites ('s1' and 's2')" in result.warnings[0]
    assert "different criteria" in result.warnings[1] and "mixes the rubric with the outputs" in result.warnings[1]
    assert result.total.noise_note == stats.NO_NOISE_FLOOR and result.item_noise_floor is None
    with transaction() as session:
        add_noise(session, H2, {"__total__": 0.4})
    with transaction() as session:
        result = compare.compare_batches(session, a, b)
    assert result.total.noise_floor == pytest.approx(1.96 * math.sqrt((0.09 + 0.16) / 5))
    assert result.item_noise_floor == pytest.approx(0.98)  # 1.96·√(.09 + .16)
    assert result.moved_most[0].beyond_noise is False  # |−0.5| < 0.98


def test_cache_serves_the_same_state_and_follows_a_changed_batch(clean_db: None) -> None:
    with transaction() as session:
        a, b = seed(session)
        session.execute(update(Batch).where(Batch.id == b).values(status="running"))
    with transaction() as session:
        first = compare.compare_batches(session, a, b)
    with transaction() as session:
        assert compare.compare_batches(session, a, b) is first
        # The pending e8 finishes: the batch's finished scores change, so the report is computed again.
        session.execute(
            update(Score).where(Score.batch_id == b, Score.status == "pending").values(status="failed", completed_at=T0)
        )
    with transaction() as session:
        second = compare.compare_batches(session, a, b)
    assert second is not first
    assert (second.b.counts.pending, second.b.counts.failed) == (0, 1)
    with transaction() as session:
        add_noise(session, H, {"__total__": 0.1})
    with transaction() as session:
        third = compare.compare_batches(session, a, b)
    assert third is not second and third.total.noise_floor is not None


def test_refusals(clean_db: None) -> None:
    with transaction() as session:
        a, _ = seed(session)
    with transaction() as session:
        with pytest.raises(BadRequest, match="same batch"):
            compare.compare_batches(session, a, a)
        missing = uuid.uuid4()
        with pytest.raises(NotFound, match=f"no batch {missing} \\(given as 'b'\\)"):
            compare.compare_batches(session, a, missing)


def test_every_pair_for_the_csv(clean_db: None) -> None:
    with transaction() as session:
        a, b = seed(session)
    with transaction() as session:
        rows = list(compare.iter_pairs(session, a, b, item_floor=0.3))
    keyed = [(r["external_id"], r["match"]) for r in rows]
    assert keyed == [
        ("e1", "paired"), ("e10", "paired"), ("e2", "paired"), ("e3", "paired"), ("e4", "paired"),
        ("e5", "excluded"), ("e6", "excluded"),
        (None, "no external id"), ("e7", "only in a"),
        ("e8", "only in b"), ("e9", "repeated external id"), ("e9", "repeated external id"),
    ]
    e2 = rows[2]
    assert (e2["a_total"], e2["b_total"], e2["delta"], e2["flip"], e2["beyond_noise"]) == (1.0, 0.5, -0.5, "pass→fail", True)
    assert (rows[5]["a_status"], rows[5]["b_status"], rows[5]["delta"], rows[5]["beyond_noise"]) == ("partial", "completed", None, None)
    assert rows[6]["a_status"] == "failed"
    assert rows[9]["b_status"] == "pending" and "a_item_id" not in rows[9]
