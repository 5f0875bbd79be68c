"""Issue 30: slices by metadata (the helper, batch summaries, compare, agreement per component and
per slice), on PostgreSQL and on the embedded SQLite store alike.

The designed data: a support bot's answers over two products. Under batch B the ``shipping`` answers
regress (every one pass → fail, total 0.9 → 0.4) and the ``billing`` ones do not move; ``returns`` has
3 items (a small slice) and 2 items have no product at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from assay.scoring import slices
from assay.scoring.errors import BadRequest
from assay.scoring.pipeline.summaries import sliced_summary
from assay.scoring.store.base import Base
from assay.scoring.store.db import make_engine
from assay.scoring.store.models import Batch, Item, Label, Score, ScoreComponent
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import parse_suite
from assay.scoring.trust import agreement, compare

Tx = Callable[[], AbstractContextManager[Session]]
CONFIG = Path(__file__).resolve().parents[2] / "config"

SUITE = """
name: support
kind: generic
threshold: 0.7
components:
  correctness:
    weight: 0.5
    judge:
      max_tokens: 256
      rubric: Is the answer correct?
      prompt: "{{input}} / {{output}}"
      verdict: {type: scale, min: 1, max: 5}
  tone:
    weight: 0.3
    judge:
      max_tokens: 256
      rubric: Is the answer polite?
      prompt: "{{output}}"
      verdict: {type: scale, min: 1, max: 5}
  exact:
    weight: 0.2
    metric: exact_match
    version: 1
"""


# --- the helper, pure -----------------------------------------------------------------------------


def test_by_must_name_a_metadata_key():
    assert slices.metadata_key("metadata.product") == "product"
    for bad in ("product", "metadata.", "metadata.a.b", "metadata.a'b", "input", "metadata." + "k" * 101):
        with pytest.raises(BadRequest, match="slice by metadata.KEY"):
            slices.metadata_key(bad)


def test_an_items_slice_is_its_scalar_value_as_text():
    assert slices.slice_of({"metadata": {"product": "billing"}}, "product") == "billing"
    assert slices.slice_of({"metadata": {"tier": 3}}, "tier") == "3"
    assert slices.slice_of({"metadata": {"tier": 2.5}}, "tier") == "2.5"
    assert slices.slice_of({"metadata": {"vip": True}}, "vip") == "true"
    assert slices.slice_of({"metadata": {"vip": None}}, "vip") is None
    assert slices.slice_of({"metadata": {}}, "vip") is None
    assert slices.slice_of({"input": "no metadata"}, "vip") is None


@pytest.mark.parametrize("value, kind", [({"a": 1}, "an object"), ([1, 2], "an array")])
def test_a_key_holding_a_structure_is_refused(value: Any, kind: str):
    with pytest.raises(BadRequest, match=f"metadata.nested holds {kind} in some items; slices need a string, number or boolean"):
        slices.slice_of({"metadata": {"nested": value}}, "nested")


def test_slices_are_largest_first_then_missing_then_the_rest_grouped_past_the_cap():
    # 20 values of 3 rows (v00…v19) are kept; "a" and "b" (one row each) are grouped as other.
    kept = [f"v{i:02d}" for i in range(slices.MAX_SLICES)]
    rows = ["b", "a"] + [v for v in reversed(kept) for _ in range(3)] + [None] * 4
    found = slices.group(rows, lambda row: row)
    assert [(s.kind, s.value, len(s.rows)) for s in found] == [
        *(("value", v, 3) for v in kept), ("missing", None, 4), ("other", None, 2),
    ]
    other = found[-1]
    assert other.values == 2 and sorted(other.rows) == ["a", "b"]
    assert other.describe(2) == {
        "kind": "other", "value": None, "n": 2, "small": True,
        "note": f"2 further values grouped: only the {slices.MAX_SLICES} largest slices are kept apart; {slices.SMALL_NOTE}",
    }
    assert found[0].describe(slices.MIN_SLICE_ITEMS) == {"kind": "value", "value": "v00", "n": 10, "small": False, "note": None}


def test_pre_aggregated_rows_are_sized_by_their_counts():
    # "x" has more rows but fewer items than "y": ties by value would put "x" first; sizes put "y" first.
    found = slices.group([("x", 1), ("y", 5), ("x", 1)], lambda row: row[0], size=lambda row: row[1])
    assert [(s.kind, s.value, len(s.rows)) for s in found] == [("value", "y", 1), ("value", "x", 2)]


# --- the store: PostgreSQL and SQLite -------------------------------------------------------------


@pytest.fixture(params=["postgresql", "sqlite"])
def tx(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tx]:
    if request.param == "postgresql":
        request.getfixturevalue("clean_db")
        from assay.scoring.store.db import transaction

        yield transaction
        return
    engine = make_engine(f"sqlite:///{tmp_path / 'slices.db'}")
    Base.metadata.create_all(engine)

    @contextmanager
    def sqlite_tx() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            yield session

    yield sqlite_tx
    engine.dispose()


def _suite(session: Session) -> str:
    return register_suite(session, parse_suite(SUITE, config_dir=CONFIG, env={}))


def _item(session: Session, external_id: str, metadata: dict[str, Any] | None) -> Item:
    payload: dict[str, Any] = {"input": "q", "output": "a"} | ({"metadata": metadata} if metadata is not None else {})
    item = Item(kind="generic", external_id=external_id, payload=payload, content_hash="0" * 64)
    session.add(item)
    session.flush()
    return item


def _score(
    session: Session, batch_id: uuid.UUID, item: Item, criteria_hash: str, total: float | None, passed: bool | None,
    components: dict[str, float] | None = None, status: str = "completed",
) -> Score:
    score = Score(
        item_id=item.id, batch_id=batch_id, suite_name="support", criteria_hash=criteria_hash, status=status,
        total=total, passed=passed, components_total=3, components_landed=3, triggered_by="test",
    )
    session.add(score)
    session.flush()
    for name, value in (components or {}).items():
        session.add(
            ScoreComponent(score_id=score.id, component=name, queue="judge", status="ok", score=value, weight=0.5, weighted_score=value / 2)
        )
    return score


def _batch(session: Session, criteria_hash: str) -> uuid.UUID:
    batch = Batch(suite_name="support", criteria_hash=criteria_hash, status="completed", created_by="test", total_items=0)
    session.add(batch)
    session.flush()
    return batch.id


PRODUCTS = [("billing", 12), ("shipping", 12), ("returns", 3), (None, 2)]


def seed_two_runs(session: Session) -> tuple[uuid.UUID, uuid.UUID]:
    """Batches A and B over the same 29 external ids; B regresses on shipping only."""
    criteria_hash = _suite(session)
    a, b = _batch(session, criteria_hash), _batch(session, criteria_hash)
    for product, n in PRODUCTS:
        for i in range(n):
            external_id = f"{product}-{i}"
            metadata = {"product": product} if product else {"channel": "mail"}
            for batch_id in (a, b):
                item = _item(session, external_id, metadata)
                regressed = batch_id == b and product == "shipping"
                total = 0.4 if regressed else 0.9
                _score(session, batch_id, item, criteria_hash, total, not regressed, {"correctness": total, "tone": 0.8})
    # One errored score in A's billing: counted, not scored.
    _score(session, a, _item(session, "billing-errored", {"product": "billing"}), criteria_hash, None, None, status="failed")
    return a, b


@pytest.fixture
def two_runs(tx: Tx) -> tuple[uuid.UUID, uuid.UUID]:
    with tx() as session:
        return seed_two_runs(session)


def test_the_batch_summary_per_slice(tx: Tx, two_runs: tuple[uuid.UUID, uuid.UUID]):
    a, b = two_runs
    with tx() as session:
        report = sliced_summary(session, b, "metadata.product")
        errored = sliced_summary(session, a, "metadata.product")
    assert (report["by"], report["min_items"], report["max_slices"]) == ("metadata.product", 10, 20)
    by_name = {(s["kind"], s["value"]): s for s in report["slices"]}
    assert list(by_name) == [("value", "billing"), ("value", "shipping"), ("value", "returns"), ("missing", None)]
    billing, shipping, returns, missing = by_name.values()
    assert (billing["items"], billing["counts"]["passed"], billing["pass_rate"], billing["mean_total"]) == (12, 12, 1.0, 0.9)
    assert (shipping["counts"]["failed"], shipping["pass_rate"], shipping["mean_total"]) == (12, 0.0, 0.4)
    assert shipping["components"]["correctness"] == {"ok": 12, "failed": 0, "skipped": 0, "mean": 0.4}
    assert shipping["small"] is False and shipping["note"] is None
    assert (returns["n"], returns["small"], returns["note"]) == (3, True, slices.SMALL_NOTE)
    assert (missing["n"], missing["small"]) == (2, True)
    # A's billing slice holds the errored score: 13 items, 12 scored.
    a_billing = errored["slices"][0]
    assert (a_billing["value"], a_billing["items"], a_billing["n"], a_billing["counts"]["errored"]) == ("billing", 13, 12, 1)


def test_compare_per_slice_shows_the_slice_that_regressed(tx: Tx, two_runs: tuple[uuid.UUID, uuid.UUID]):
    a, b = two_runs
    compare.clear_cache()
    with tx() as session:
        whole = compare.compare_batches(session, a, b)
        report = compare.compare_batches(session, a, b, "metadata.product")
    assert whole.slices is None and report.by == "metadata.product"
    assert report.total == whole.total  # slicing adds, never changes, the whole report
    by_name = {(s.slice["kind"], s.slice["value"]): s for s in report.slices}
    assert list(by_name) == [("value", "billing"), ("value", "shipping"), ("value", "returns"), ("missing", None)]
    billing, shipping = by_name[("value", "billing")], by_name[("value", "shipping")]
    assert billing.total.difference.mean == pytest.approx(0.0)
    assert (billing.total.difference.ci_low, billing.total.difference.ci_high) == (pytest.approx(0.0), pytest.approx(0.0))
    assert (billing.mcnemar.pass_to_fail, billing.mcnemar.p_value) == (0, 1.0)
    assert shipping.total.difference.mean == pytest.approx(-0.5)
    assert shipping.total.difference.ci_high == pytest.approx(-0.5)
    assert (shipping.mcnemar.pass_to_fail, shipping.mcnemar.fail_to_pass) == (12, 0)
    assert shipping.mcnemar.p_value == pytest.approx(2 * 0.5**12)
    assert (shipping.tally.losses, shipping.pass_rate.difference.mean) == (12, pytest.approx(-1.0))
    assert shipping.slice["small"] is False
    assert by_name[("value", "returns")].slice == {"kind": "value", "value": "returns", "n": 3, "small": True, "note": slices.SMALL_NOTE}


def test_the_number_of_slices_is_capped_and_the_rest_said_to_be_grouped(tx: Tx):
    with tx() as session:
        criteria_hash = _suite(session)
        batch = _batch(session, criteria_hash)
        for i in range(slices.MAX_SLICES + 5):
            # The first five values hold two items each: they are among the kept ones.
            for copy in range(2 if i < 5 else 1):
                _score(session, batch, _item(session, f"u{i}-{copy}", {"user": f"u{i:02d}"}), criteria_hash, 1.0, True)
        report = sliced_summary(session, batch, "metadata.user")
    kinds = [s["kind"] for s in report["slices"]]
    assert kinds == ["value"] * slices.MAX_SLICES + ["other"]
    assert [s["value"] for s in report["slices"][:6]] == ["u00", "u01", "u02", "u03", "u04", "u05"]
    other = report["slices"][-1]
    assert (other["items"], other["value"]) == (5, None)
    assert other["note"].startswith(f"5 further values grouped: only the {slices.MAX_SLICES} largest slices are kept apart")


def test_a_key_holding_objects_is_refused_everywhere(tx: Tx, two_runs: tuple[uuid.UUID, uuid.UUID]):
    a, b = two_runs
    with tx() as session:
        criteria_hash = session.get(Batch, b).criteria_hash
        item = _item(session, "nested-1", {"product": {"name": "billing"}})
        _score(session, b, item, criteria_hash, 0.9, True)
    compare.clear_cache()
    with tx() as session, pytest.raises(BadRequest, match="metadata.product holds an object"):
        sliced_summary(session, b, "metadata.product")
    with tx() as session:
        # A's items are all scalar, but B's one nested item has no pair in A: only paired rows are read.
        assert compare.compare_batches(session, a, b, "metadata.product").slices is not None
    with tx() as session:
        _score(session, a, _item(session, "nested-1", {"product": {"name": "billing"}}), criteria_hash, 0.9, True)
    compare.clear_cache()
    with tx() as session, pytest.raises(BadRequest, match="metadata.product holds an object"):
        compare.compare_batches(session, a, b, "metadata.product")


def test_agreement_per_component_and_per_slice(tx: Tx):
    """Correctness follows the people on every item; tone says the opposite of them."""
    with tx() as session:
        criteria_hash = _suite(session)
        batch = _batch(session, criteria_hash)
        for product, n in (("billing", 12), ("shipping", 4)):
            for i in range(n):
                human_pass = i % 2 == 0
                item = _item(session, f"{product}-{i}", {"product": product})
                correctness = 0.9 if human_pass else 0.2
                tone = 0.2 if human_pass else 0.9
                total = 0.5 * correctness + 0.3 * tone + 0.2
                _score(session, batch, item, criteria_hash, total, total >= 0.7, {"correctness": correctness, "tone": tone})
                session.add(
                    Label(
                        suite_name="support", item_id=item.id, annotator="alice", written_by="alice",
                        passed=human_pass, score=0.8 + i / 100 if human_pass else 0.1 + i / 100, source="upload",
                    )
                )
        report = agreement.suite_agreement(session, "support", by="metadata.product")
    [h] = report["hashes"]
    correctness, tone = h["components"]["correctness"], h["components"]["tone"]
    assert list(h["components"]) == ["correctness", "tone"]  # judge components only, not the metric
    assert correctness["compared_items"] == 16 and correctness["accuracy"] == 1.0 and correctness["kappa"] == pytest.approx(1.0)
    assert correctness["spearman"]["rho"] > 0.8
    assert tone["accuracy"] == 0.0 and tone["kappa"] == pytest.approx(-1.0)
    assert tone["confusion"] == {
        "machine_pass_human_pass": 0, "machine_pass_human_fail": 8, "machine_fail_human_pass": 8, "machine_fail_human_fail": 0,
    }
    assert tone["spearman"]["rho"] < -0.8
    # The total keeps its own statistics beside them (0.5·0.9 + 0.3·0.2 + 0.2 = 0.71 passes).
    assert h["accuracy"] == 1.0 and h["compared_items"] == 16
    billing, shipping = h["slices"]
    assert (billing["value"], billing["n"], billing["small"]) == ("billing", 12, False)
    assert (shipping["value"], shipping["n"], shipping["small"], shipping["note"]) == ("shipping", 4, True, slices.SMALL_NOTE)
    assert shipping["components"]["tone"]["accuracy"] == 0.0 and shipping["total"]["compared_items"] == 4
    assert report["by"] == "metadata.product" and report["min_slice_items"] == slices.MIN_SLICE_ITEMS
