"""The review queue: rules (pure), entering at finalize, closing on a re-score, recording a review."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import delete, select, update

from assay.scoring.errors import Conflict, CriteriaError, InvalidInput, NotFound
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.store.db import transaction
from assay.scoring.store.models import (
    Batch,
    Label,
    Review,
    ReviewQueueEntry,
    Score,
    SuiteRecord,
)
from assay.scoring.suites.loader import ReviewRules, parse_suite
from assay.scoring.trust import review
from tests.scoring.test_pipeline import land_all, make_batch, plan_all

CONFIG = Path(__file__).resolve().parents[2] / "config"


def comp(name: str, score: float | None, status: str = "ok", details: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(component=name, score=score, status=status, details=details or {})


# --- rules ------------------------------------------------------------------------------------------------------


def test_random_draw_is_sha256_of_the_score_id_as_a_fraction():
    score_id = uuid.UUID("00000000-0000-0000-0000-000000000001")
    expected = int(hashlib.sha256(str(score_id).encode()).hexdigest()[:16], 16) / 2**64
    assert review.random_draw(score_id) == expected
    assert review.random_draw(str(score_id)) == expected  # the same id draws the same, however given
    assert 0 <= expected < 1


def test_random_share_picks_about_its_share_and_the_same_ids_each_time():
    rules = ReviewRules(random_share=0.2)
    ids = [uuid.UUID(int=i) for i in range(5000)]
    picked = [i for i in ids if review.match_rules(rules, score_id=i, total=0.5, threshold=0.9, components=[])]
    assert 900 < len(picked) < 1100  # 20 % of 5,000 = 1,000; a binomial sd of ~28
    again = [i for i in ids if review.match_rules(rules, score_id=i, total=0.5, threshold=0.9, components=[])]
    assert picked == again
    assert not any(review.match_rules(ReviewRules(random_share=0.0), score_id=i, total=0.5, threshold=0.9, components=[]) for i in ids[:200])
    assert all(review.match_rules(ReviewRules(random_share=1.0), score_id=i, total=0.5, threshold=0.9, components=[]) for i in ids[:200])


def test_near_threshold_matches_within_delta_inclusive():
    rules = ReviewRules(near_threshold=0.05)
    sid = uuid.uuid4()
    assert review.match_rules(rules, score_id=sid, total=0.85, threshold=0.9, components=[]) == [
        {"rule": "near_threshold", "total": 0.85, "threshold": 0.9, "within": 0.05}
    ]
    assert review.match_rules(rules, score_id=sid, total=0.95, threshold=0.9, components=[])
    assert review.match_rules(rules, score_id=sid, total=0.84, threshold=0.9, components=[]) == []
    assert review.match_rules(rules, score_id=sid, total=0.96, threshold=0.9, components=[]) == []
    assert review.match_rules(rules, score_id=sid, total=None, threshold=0.9, components=[]) == []


def test_disagreement_is_the_spread_of_the_named_scored_components():
    rules = ReviewRules.model_validate({"disagreement": [{"components": ["a", "b", "c"], "more_than": 0.4}]})
    sid = uuid.uuid4()
    found = review.match_rules(
        rules, score_id=sid, total=0.5, threshold=0.9, components=[comp("a", 0.9), comp("b", 0.45), comp("c", 0.6), comp("d", 0.0)]
    )
    assert found == [{"rule": "disagreement", "scores": {"a": 0.9, "b": 0.45, "c": 0.6}, "spread": 0.45, "more_than": 0.4}]
    # exactly the limit is not more than it; a skipped or failed component does not count
    assert review.match_rules(rules, score_id=sid, total=0.5, threshold=0.9, components=[comp("a", 0.9), comp("b", 0.5)]) == []
    assert review.match_rules(
        rules, score_id=sid, total=0.5, threshold=0.9, components=[comp("a", 0.9), comp("b", None, "skipped"), comp("c", 0.0, "failed")]
    ) == []


def test_repaired_names_the_components_whose_answer_needed_a_repair():
    sid = uuid.uuid4()
    comps = [comp("judge_a", 0.7, details={"repaired": True}), comp("judge_b", 0.7, details={"repaired": False}), comp("m", 1.0)]
    assert review.match_rules(ReviewRules(repaired=True), score_id=sid, total=0.7, threshold=0.9, components=comps) == [
        {"rule": "repaired", "components": ["judge_a"]}
    ]
    assert review.match_rules(ReviewRules(repaired=False), score_id=sid, total=0.7, threshold=0.9, components=comps) == []


def test_every_rule_that_matches_is_a_reason_in_order():
    rules = ReviewRules.model_validate(
        {"near_threshold": 0.1, "disagreement": [{"components": ["a", "b"], "more_than": 0.1}], "repaired": True, "random_share": 1.0}
    )
    found = review.match_rules(
        rules, score_id=uuid.uuid4(), total=0.85, threshold=0.9, components=[comp("a", 1.0, details={"repaired": True}), comp("b", 0.7)]
    )
    assert [r["rule"] for r in found] == ["near_threshold", "disagreement", "repaired", "random"]
    assert all(review.describe(r) for r in found)


def test_majority_of_labels():
    assert review.majority([]) is None
    assert review.majority([True, True, False]) == "pass"
    assert review.majority([False]) == "fail"
    assert review.majority([True, False]) == "tie"


# --- the rules are options: parsed, validated, never hashed ---------------------------------------------------------

SUITE = """
name: reviewed
kind: generic
threshold: 0.7
components:
  exact: {weight: 0.5, metric: exact_match, version: 1}
  fuzzy: {weight: 0.5, metric: levenshtein_ratio, version: 1, args: {reference: {from: expected}}}
"""


def test_review_rules_change_no_criteria_hash():
    plain = parse_suite(SUITE, config_dir=CONFIG, env={}, origin="api")
    ruled = parse_suite(
        SUITE + "review:\n  near_threshold: 0.05\n  disagreement: [{components: [exact, fuzzy], more_than: 0.4}]\n"
        "  repaired: true\n  random_share: 0.02\n",
        config_dir=CONFIG,
        env={},
        origin="api",
    )
    assert ruled.criteria_hash == plain.criteria_hash
    assert ruled.options.review.near_threshold == 0.05 and ruled.options.review.random_share == 0.02
    assert ruled.options.review.disagreement[0].components == ["exact", "fuzzy"]
    assert plain.options.review == ReviewRules() and not plain.options.review.active
    assert "review" not in ruled.criteria.canonical_json()


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("  disagreement: [{components: [exact, nope], more_than: 0.4}]", "not components of this suite"),
        ("  disagreement: [{components: [exact], more_than: 0.4}]", "at least 2"),
        ("  random_share: 1.5", "less than or equal to 1"),
        ("  near_threshold: -0.1", "greater than 0"),
        ("  sometimes: true", "Extra inputs are not permitted"),
    ],
)
def test_bad_review_rules_are_refused_with_the_reason(rules, message):
    with pytest.raises(CriteriaError, match=message):
        parse_suite(SUITE + "review:\n" + rules + "\n", config_dir=CONFIG, env={}, origin="api")


# --- at finalize (kql: four components, threshold 0.9) ----------------------------------------------------------------


def _set_rules(rules: dict, suite: str = "kql") -> None:
    with transaction() as s:
        record = s.get(SuiteRecord, suite)
        record.options = {**record.options, "review": rules}


def _score(batch_id, result_for=lambda ref: ComponentResult.ok(1.0)) -> uuid.UUID:
    land_all(plan_all(batch_id), result_for)
    with transaction() as s:
        return s.scalars(select(Score.id).where(Score.batch_id == batch_id)).one()


def _entries() -> list[ReviewQueueEntry]:
    with transaction() as s:
        return list(s.scalars(select(ReviewQueueEntry).order_by(ReviewQueueEntry.created_at)))


def test_a_completed_score_matching_a_rule_enters_the_queue_with_its_reasons(clean_db):
    _set_rules({"near_threshold": 0.05})
    batch_id, _ = make_batch(1)
    # 0.25 * 0.7 + 0.75 = 0.925: within 0.05 of 0.9
    score_id = _score(batch_id, lambda ref: ComponentResult.ok(0.7) if ref.component == "results_match" else ComponentResult.ok(1.0))
    (entry,) = _entries()
    assert entry.score_id == score_id and entry.suite_name == "kql" and entry.status == "open"
    assert entry.reasons == [{"rule": "near_threshold", "total": pytest.approx(0.925), "threshold": 0.9, "within": 0.05}]


def test_a_score_matching_no_rule_or_a_suite_without_rules_stays_out(clean_db):
    batch_id, _ = make_batch(1)
    _score(batch_id, lambda ref: ComponentResult.ok(0.7) if ref.component == "results_match" else ComponentResult.ok(1.0))
    assert _entries() == []  # kql declares no rules
    _set_rules({"near_threshold": 0.01})
    batch_id, _ = make_batch(1)
    _score(batch_id)  # total 1.0, 0.1 from the threshold
    assert _entries() == []


def test_failed_scores_never_enter(clean_db):
    _set_rules({"random_share": 1.0})
    batch_id, _ = make_batch(1)
    _score(batch_id, lambda ref: ComponentResult.failed("boom") if ref.component == "llm_grading" else ComponentResult.ok(1.0))
    assert _entries() == []


def test_a_redelivered_finalize_enters_once(clean_db):
    from assay.scoring.pipeline.finalize import finalize_score

    _set_rules({"random_share": 1.0})
    batch_id, _ = make_batch(1)
    score_id = _score(batch_id)
    with transaction() as s:  # as if the last landing were delivered again and its finalize ran again
        s.execute(update(Score).where(Score.id == score_id).values(status="in_progress"))
    with transaction() as s:
        finalize_score(s, score_id)
    assert len(_entries()) == 1


def test_calibration_scores_never_enter(clean_db):
    from assay.scoring.store.models import CalibrationRun

    _set_rules({"random_share": 1.0})
    batch_id, (score_id,) = make_batch(1)
    with transaction() as s:
        score = s.get(Score, score_id)
        run = CalibrationRun(
            suite_name="kql", criteria_hash=score.criteria_hash, batch_id=batch_id, sample=1, repeats=2, status="running", created_by="t"
        )
        s.add(run)
        s.flush()
        score.calibration_run_id = run.id
        score.calibration_repeat = 1
    _score(batch_id)
    assert _entries() == []


def test_a_completed_rescore_closes_the_older_open_entry_and_the_review_stays(clean_db):
    _set_rules({"random_share": 1.0})
    batch_id, (reviewed_score, open_score) = make_batch(2)
    land_all(plan_all(batch_id))
    entries = {e.score_id: e for e in _entries()}
    with transaction() as s:
        review.record_review(s, entries[reviewed_score].id, reviewer="alice", passed=False, comment="wrong table")
    with transaction() as s:  # a re-score of both items (the same suite)
        old = [s.get(Score, sid) for sid in (reviewed_score, open_score)]
        rescore = Batch(suite_name="kql", criteria_hash=old[0].criteria_hash, created_by="t", total_items=2)
        s.add(rescore)
        s.flush()
        for pos, o in enumerate(old, 1):
            s.add(
                Score(
                    item_id=o.item_id, batch_id=rescore.id, position=pos, suite_name="kql", criteria_hash=o.criteria_hash,
                    components_total=o.components_total, triggered_by="t",
                )
            )
        rescore_id = rescore.id
    land_all(plan_all(rescore_id))
    after = {e.score_id: e for e in _entries()}
    assert after[open_score].status == "closed" and after[open_score].closed_at is not None
    assert after[reviewed_score].status == "reviewed"
    newer = [e for sid, e in after.items() if sid not in (reviewed_score, open_score)]
    assert len(newer) == 2 and {e.status for e in newer} == {"open"}
    with transaction() as s:
        assert s.scalar(select(Label.passed).where(Label.annotator == "alice")) is False
        assert s.scalar(select(Review.comment).where(Review.reviewer == "alice")) == "wrong table"
    with transaction() as s, pytest.raises(Conflict, match="closed"):
        review.record_review(s, after[open_score].id, reviewer="bob", passed=True)


def test_record_review_stores_reviewer_and_time_upserts_the_label_and_keeps_the_machine_score(clean_db):
    _set_rules({"random_share": 1.0})
    batch_id, _ = make_batch(1)
    score_id = _score(batch_id)
    (entry,) = _entries()
    with transaction() as s:
        machine = s.get(Score, score_id)
        before = (machine.total, machine.passed, machine.status)
        first = review.record_review(s, entry.id, reviewer="alice", passed=False, score=0.2, comment="  misses a filter ")
        assert first.created_at is not None
    with transaction() as s:
        review.record_review(s, entry.id, reviewer="alice", passed=True, score=0.9)  # alice changes her mind
        review.record_review(s, entry.id, reviewer="bob", passed=False)
    with transaction() as s:
        machine = s.get(Score, score_id)
        assert (machine.total, machine.passed, machine.status) == before
        assert s.get(ReviewQueueEntry, entry.id).status == "reviewed"
        labels = {l.annotator: l for l in s.scalars(select(Label))}
        assert set(labels) == {"alice", "bob"}
        assert (labels["alice"].passed, labels["alice"].score, labels["alice"].source) == (True, 0.9, "review")
        assert labels["bob"].passed is False and labels["bob"].score is None
        reviews = review.reviews_of_entry(s, entry.id)
        assert [(r.reviewer, r.passed) for r in reviews] == [("alice", False), ("alice", True), ("bob", False)]
        assert reviews[0].comment == "misses a filter"
        verdict = review.human_verdicts(s, "kql", [machine.item_id])[machine.item_id]
        assert (verdict.reviewer, verdict.passed, verdict.labels, verdict.majority) == ("bob", False, 2, "tie")


def test_record_review_refuses_bad_input(clean_db):
    _set_rules({"random_share": 1.0})
    batch_id, _ = make_batch(1)
    _score(batch_id)
    (entry,) = _entries()
    with transaction() as s, pytest.raises(NotFound):
        review.record_review(s, uuid.uuid4(), reviewer="alice", passed=True)
    with transaction() as s, pytest.raises(InvalidInput):
        review.record_review(s, entry.id, reviewer="  ", passed=True)
    with transaction() as s, pytest.raises(InvalidInput):
        review.record_review(s, entry.id, reviewer="alice", passed=True, score=1.5)


def test_open_counts_and_queue_listing(clean_db):
    _set_rules({"random_share": 1.0})
    batch_id, _ = make_batch(3)
    land_all(plan_all(batch_id))
    with transaction() as s:
        assert review.open_counts(s) == {"kql": 3}
        page, total = review.list_queue(s, "kql", limit=2, offset=0)
        assert total == 3 and len(page) == 2
        rest, _ = review.list_queue(s, "kql", limit=2, offset=2)
        assert len(rest) == 1 and rest[0].id not in {e.id for e in page}
        review.record_review(s, page[0].id, reviewer="alice", passed=True)
    with transaction() as s:
        assert review.open_counts(s) == {"kql": 2}
        assert review.queue_counts(s) == {"kql": {"open": 2, "reviewed": 1, "closed": 0}}
        assert review.get_entry(s, page[0].id).as_dict()["status"] == "reviewed"


def test_two_scores_of_one_item_finalized_together_leave_only_the_newer_entry_open(clean_db):
    _set_rules({"random_share": 1.0})
    batch_id, (older,) = make_batch(1)
    land_all(plan_all(batch_id))
    with transaction() as s:
        s.execute(delete(ReviewQueueEntry))
        o = s.get(Score, older)
        newer = Score(
            item_id=o.item_id, batch_id=batch_id, position=2, suite_name="kql", criteria_hash=o.criteria_hash,
            components_total=o.components_total, triggered_by="t", status="completed", total=1.0, passed=True,
        )
        s.add(newer)
        s.flush()
        finalized = [
            review.Finalized(score.id, "kql", score.item_id, score.criteria_hash, 0.9, "completed", 1.0, [])
            for score in (newer, o)  # the newer first: the order of a group is no guide
        ]
        matched = review.after_finalize(s, finalized)
        newer_id = newer.id
    assert set(matched) == {older, newer_id}
    assert {e.score_id: e.status for e in _entries()} == {older: "closed", newer_id: "open"}
