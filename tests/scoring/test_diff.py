"""``criteria_diff`` on a small known case, on PostgreSQL and on SQLite (embedded mode): every number.

The case (suite ``s1`` unless said; totals, flags and costs are binary fractions so means are exact):

    item  under OLD (a, b, c)              under NEW (a, b, d)
    q1    0.5  fail  $0.25  a.5  b.5  c.5   0.75 pass $0.5    a1   b.5  d.75        fail→pass
    q2    1.0  pass  $0.25  a1   b1   c1    1.0 pass $1 (earlier) ; 0.5 fail $0.125 a.5 b.5 (latest)  pass→fail
    q3    0.75 pass  $0.5   a.5  b1   c–    1.0  pass $0.5    a1   b–   d1
    q4    0.25 fail  $0.125 a.25 b.25 c.25  0.5  fail $0.25   a.25 b–   d.25
    q5    0.5  fail  $0.125                 failed score; suite s2: 1.0 pass $2
    q6    (a pending score)                 1.0  pass $0.5
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session

from assay.scoring.errors import BadRequest, NotFound
from assay.scoring.rescoring.diff import NoiseBeside, criteria_diff, iter_diff_items, resolve_pair
from assay.scoring.store.db import make_engine
from assay.scoring.store.models import Base, CriteriaDefinition, Item, Score, ScoreComponent, SuiteRecord

OLD = hashlib.sha256(b"old criteria").hexdigest()
NEW = hashlib.sha256(b"new criteria").hexdigest()
# Two hashes sharing their first 8 characters: that prefix is ambiguous.
TWIN_A, TWIN_B = "abcdef01" + "0" * 56, "abcdef01" + "1" * 56
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

Tx = Callable[[], AbstractContextManager[Session]]


def _criteria(criteria_hash: str, components: list[str]) -> CriteriaDefinition:
    weight = 1 / len(components)
    return CriteriaDefinition(
        criteria_hash=criteria_hash,
        criteria_content={"kind": "kql", "threshold": 0.9, "components": {c: {"weight": weight} for c in components}},
        created_at=T0,
    )


def seed_known_case(session: Session) -> dict[str, uuid.UUID]:
    """The case in the module docstring; returns external id -> item id. Registers suites ``s1``, ``s2``."""
    session.add_all([_criteria(OLD, ["a", "b", "c"]), _criteria(NEW, ["a", "b", "d"])])
    session.add_all([_criteria(TWIN_A, ["a"]), _criteria(TWIN_B, ["a"])])
    session.flush()
    for name in ("s1", "s2"):
        session.add(SuiteRecord(name=name, kind="kql", current_criteria_hash=NEW, options={}))
    items = {}
    for external_id in ("q1", "q2", "q3", "q4", "q5", "q6"):
        item = Item(kind="kql", external_id=external_id, payload={}, content_hash="0" * 64)
        session.add(item)
        session.flush()
        items[external_id] = item.id

    def score(
        external_id: str,
        criteria_hash: str,
        total: float | None,
        passed: bool | None,
        cost: float,
        components: dict[str, float | None] | None = None,
        *,
        status: str = "completed",
        suite: str = "s1",
        at: datetime = T0,
    ) -> None:
        row = Score(
            item_id=items[external_id], suite_name=suite, criteria_hash=criteria_hash, status=status,
            total=total, passed=passed, cost_usd=cost, components_total=len(components or {}),
            components_landed=len(components or {}), triggered_by="test", created_at=at,
            completed_at=at if status in ("completed", "failed") else None,
        )
        session.add(row)
        session.flush()
        for name, value in (components or {}).items():
            session.add(
                ScoreComponent(
                    score_id=row.id, component=name, queue="metrics", status="ok" if value is not None else "skipped",
                    score=value, weight=1 / 3, weighted_score=None if value is None else value / 3,
                )
            )

    score("q1", OLD, 0.5, False, 0.25, {"a": 0.5, "b": 0.5, "c": 0.5})
    score("q2", OLD, 1.0, True, 0.25, {"a": 1.0, "b": 1.0, "c": 1.0})
    score("q3", OLD, 0.75, True, 0.5, {"a": 0.5, "b": 1.0, "c": None})
    score("q4", OLD, 0.25, False, 0.125, {"a": 0.25, "b": 0.25, "c": 0.25})
    score("q5", OLD, 0.5, False, 0.125)
    score("q6", OLD, None, None, 0.0, status="pending")
    score("q1", NEW, 0.75, True, 0.5, {"a": 1.0, "b": 0.5, "d": 0.75})
    # Added first but completed later: the latest completion wins, not the latest row.
    score("q2", NEW, 0.5, False, 0.125, {"a": 0.5, "b": 0.5, "d": 0.5}, at=T0 + timedelta(hours=1))
    score("q2", NEW, 1.0, True, 1.0, {"a": 1.0, "b": 1.0, "d": 1.0})
    score("q3", NEW, 1.0, True, 0.5, {"a": 1.0, "b": None, "d": 1.0})
    score("q4", NEW, 0.5, False, 0.25, {"a": 0.25, "b": None, "d": 0.25})
    score("q5", NEW, None, False, 0.0, status="failed")
    score("q5", NEW, 1.0, True, 2.0, suite="s2")
    score("q6", NEW, 1.0, True, 0.5)
    session.flush()
    return items


@pytest.fixture(params=["postgresql", "sqlite"])
def tx(request: pytest.FixtureRequest, tmp_path) -> Iterator[Tx]:  # type: ignore[no-untyped-def]
    """A unit of work on each backend: the test run's PostgreSQL, or a fresh embedded SQLite file."""
    if request.param == "postgresql":
        request.getfixturevalue("clean_db")
        from assay.scoring.store.db import transaction

        yield transaction
        return
    engine = make_engine(f"sqlite:///{tmp_path / 'diff.db'}")
    Base.metadata.create_all(engine)

    @contextmanager
    def sqlite_tx() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            yield session

    yield sqlite_tx
    engine.dispose()


@pytest.fixture
def case(tx: Tx) -> dict[str, uuid.UUID]:
    with tx() as session:
        return seed_known_case(session)


def test_known_case_aggregates(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    with tx() as session:
        result = criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW)
    assert (result.suite, result.from_hash, result.to_hash) == ("s1", OLD, NEW)
    s = result.summary
    assert (s.items_compared, s.items_only_from, s.items_only_to) == (4, 1, 1)
    assert s.mean_old_total == 0.625  # (0.5 + 1 + 0.75 + 0.25) / 4
    assert s.mean_new_total == 0.6875  # (0.75 + 0.5 + 1 + 0.5) / 4
    assert s.mean_delta == 0.0625  # (0.25 − 0.5 + 0.25 + 0.25) / 4
    assert (s.pass_to_fail, s.fail_to_pass) == (1, 1)
    assert s.cost_usd == 1.375  # 0.5 + 0.125 (q2's latest) + 0.5 + 0.25
    assert s.cost_usd_from == 1.125
    shifts = {c.component: (c.n, c.mean_old, c.mean_new, c.mean_shift) for c in s.components}
    assert shifts == {
        "a": (4, 0.5625, 0.6875, 0.125),
        "b": (2, 0.75, 0.5, -0.25),  # q3 and q4 have no b under NEW (skipped)
    }
    assert (s.components_only_from, s.components_only_to) == (["c"], ["d"])
    assert result.total_rows == 4


def test_known_case_rows_largest_delta_first(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    with tx() as session:
        result = criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW)
    rows = {i.external_id: i for i in result.items}
    assert result.items[0].external_id == "q2"
    assert [i.item_id for i in result.items[1:]] == sorted(case[q] for q in ("q1", "q3", "q4"))
    q2 = rows["q2"]
    assert (q2.item_id, q2.old_total, q2.new_total, q2.delta) == (case["q2"], 1.0, 0.5, -0.5)
    assert (q2.old_passed, q2.new_passed, q2.flip) == (True, False, "pass→fail")
    assert (rows["q1"].delta, rows["q1"].flip) == (0.25, "fail→pass")
    assert (rows["q3"].old_total, rows["q3"].new_total, rows["q3"].flip) == (0.75, 1.0, None)
    assert (rows["q4"].delta, rows["q4"].old_passed, rows["q4"].new_passed, rows["q4"].flip) == (0.25, False, False, None)


def test_pages_orders_and_flips_only(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    by_item = sorted(case[q] for q in ("q1", "q2", "q3", "q4"))
    with tx() as session:
        pages = [
            criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW, order="item", limit=3, offset=offset)
            for offset in (0, 3)
        ]
        flips = criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW, flips_only=True)
    assert [i.item_id for p in pages for i in p.items] == by_item
    assert len(pages[0].items) == 3
    assert [i.external_id for i in flips.items] == ["q2", "q1"]
    assert flips.total_rows == 2 and flips.summary.items_compared == 4


def test_without_a_suite_every_suite_counts(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    with tx() as session:
        result = criteria_diff(session, suite=None, from_hash=OLD, to_hash=NEW)
    s = result.summary
    assert (s.items_compared, s.items_only_from, s.items_only_to) == (5, 0, 1)
    q5 = next(i for i in result.items if i.external_id == "q5")
    assert (q5.delta, q5.flip) == (0.5, "fail→pass")  # its s2 score: the failed one never counts
    assert s.cost_usd == 3.375


def test_streamed_rows_are_every_pair_by_item(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    with tx() as session:
        rows = list(iter_diff_items(session, suite="s1", from_hash=OLD, to_hash=NEW, chunk=1))
        flips = list(iter_diff_items(session, suite="s1", from_hash=OLD, to_hash=NEW, flips_only=True))
    assert [r.item_id for r in rows] == sorted(case[q] for q in ("q1", "q2", "q3", "q4"))
    assert {r.external_id: r.delta for r in rows} == {"q1": 0.25, "q2": -0.5, "q3": 0.25, "q4": 0.25}
    assert sorted(r.external_id for r in flips) == ["q1", "q2"]


def test_unique_prefixes_resolve(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    with tx() as session:
        old, new = resolve_pair(session, suite=None, from_hash=OLD[:8].upper(), to_hash=NEW[:20])
    assert (old.criteria_hash, new.criteria_hash) == (OLD, NEW)


@pytest.mark.parametrize(
    ("suite", "from_hash", "to_hash", "error", "message"),
    [
        ("s1", "f" * 64, NEW, NotFound, "no criteria with hash " + "f" * 64),
        ("s1", OLD, "0123456789", NotFound, "no criteria with hash 0123456789"),
        ("s1", OLD, OLD[:10], BadRequest, "the same criteria"),
        ("s1", "abcdef01", NEW, BadRequest, "abcdef01 is ambiguous"),
        ("s1", OLD[:7], NEW, BadRequest, "8 to 64 hex characters"),
        ("s1", "zz" + OLD[2:], NEW, BadRequest, "8 to 64 hex characters"),
        ("nope", OLD, NEW, NotFound, "no suite named 'nope'"),
        ("s1\x00", OLD, NEW, NotFound, "no suite named 's1\\x00'"),
    ],
)
def test_mistakes_are_domain_errors(tx: Tx, case: dict[str, uuid.UUID], suite, from_hash, to_hash, error, message) -> None:  # type: ignore[no-untyped-def]
    with tx() as session, pytest.raises(error) as raised:
        criteria_diff(session, suite=suite, from_hash=from_hash, to_hash=to_hash)
    assert message in raised.value.message


def test_known_case_intervals_mcnemar_and_no_noise_floor(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    from assay.scoring.trust import stats

    with tx() as session:
        s = criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW).summary
    # Deltas q1 +.25, q2 −.5, q3 +.25, q4 +.25.
    assert s.delta_interval == stats.paired_bootstrap([0.25, -0.5, 0.25, 0.25])
    assert s.delta_interval.ci_low < s.mean_delta < s.delta_interval.ci_high
    assert s.tally == stats.Tally(wins=3, ties=0, losses=1)
    assert s.mcnemar == stats.McNemar(1, 1, 2, 1.0)
    assert s.noise == NoiseBeside(None, None, "no noise floor measured")
    assert s.item_noise_floor is None and (s.noise_from, s.noise_to) == (None, None)
    a = next(c for c in s.components if c.component == "a")
    assert a.interval == stats.paired_bootstrap([0.5, -0.5, 0.5, 0.0])  # q1..q4's a under NEW − OLD
    assert a.noise.noise_note == "no noise floor measured"


def _calibrate(session: Session, criteria_hash: str, sigmas: dict[str, float]) -> None:
    from assay.scoring.store.models import CalibrationRun, NoiseEstimate

    run = CalibrationRun(suite_name="s1", criteria_hash=criteria_hash, sample=4, repeats=3, status="completed", created_by="t")
    session.add(run)
    session.flush()
    for name, sigma in sigmas.items():
        session.add(
            NoiseEstimate(
                calibration_run_id=run.id, component=name, criteria_hash=criteria_hash, suite_name="s1",
                sigma_w=sigma, items=4, repeats=3, computed_at=T0,
            )
        )


def test_noise_floor_across_the_two_hashes(tx: Tx, case: dict[str, uuid.UUID]) -> None:
    with tx() as session:
        _calibrate(session, OLD, {"__total__": 0.3, "a": 0.03})
    with tx() as session:
        s = criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW).summary
        assert s.noise.noise_note == "no noise floor measured"  # only one side measured
        _calibrate(session, NEW, {"__total__": 0.4, "a": 0.04})
    with tx() as session:
        result = criteria_diff(session, suite="s1", from_hash=OLD, to_hash=NEW)
        items = list(iter_diff_items(session, suite="s1", from_hash=OLD, to_hash=NEW, item_floor=0.3))
    s = result.summary
    assert s.noise.noise_floor == pytest.approx(0.49)  # 1.96·√((.09 + .16)/4)
    assert s.noise.beyond_noise is False and s.noise.noise_note is None
    assert s.item_noise_floor == pytest.approx(0.98)  # 1.96·√(.09 + .16)
    assert all(i.beyond_noise is False for i in result.items)
    a = next(c for c in s.components if c.component == "a")
    assert a.noise.noise_floor == pytest.approx(0.049)  # 1.96·√((.0009 + .0016)/4)
    assert a.noise.beyond_noise is True  # mean shift .125
    b = next(c for c in s.components if c.component == "b")
    assert b.noise.noise_note == "no noise floor measured"
    assert {i.external_id: i.beyond_noise for i in items} == {"q1": False, "q2": True, "q3": False, "q4": False}
