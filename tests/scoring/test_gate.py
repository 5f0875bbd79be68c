"""The gate's rule on designed data: a clear regression fails with the rule named, no change passes, a
drop inside the noise floor passes, differing criteria hashes and too few pairs fail with the reason,
errored candidate items count as failures, and slices are Holm-corrected."""

from __future__ import annotations

import json

import pytest

from assay.scoring.errors import BadRequest
from assay.scoring.trust.gate import (
    RULE_DROP,
    RULE_HASH,
    RULE_INCOMPLETE,
    RULE_MCNEMAR,
    RULE_TOO_FEW,
    GateItem,
    GateOptions,
    evaluate,
    holm_levels,
    items_from_results,
)

HASH = "a" * 64


def item(n: int, total: float, *, status: str = "completed", partial: bool = False, h: str = HASH,
         slice: str | None = None, threshold: float = 0.5) -> GateItem:
    done = status == "completed"
    return GateItem(f"q{n:03d}", h, status, partial, (total >= threshold) if done else None,
                    total if done else None, slice, None if done else "judge timed out")


def side(totals: list[float], **kw: object) -> list[GateItem]:
    return [item(n, t, **kw) for n, t in enumerate(totals)]  # type: ignore[arg-type]


def rules(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.rule for f in report.failures]


BASE = [0.9, 0.8, 0.7, 0.95, 0.6, 0.85, 0.75, 0.9, 0.65, 0.8] * 3  # 30 items, every one passing


def test_a_clear_regression_fails_and_names_both_rules() -> None:
    report = evaluate(side(BASE), side([t - 0.4 for t in BASE]), GateOptions())
    assert not report.passed
    assert rules(report) == [RULE_MCNEMAR, RULE_DROP]
    mcnemar = report.failures[0].message
    assert "pass→fail" in mcnemar and "p = " in mcnemar
    assert report.overall.pass_to_fail == sum(1 for t in BASE if t - 0.4 < 0.5)
    failing = [i for i in report.items if not i.passed]
    assert failing and all(i.reason.startswith("pass→fail") for i in failing)


def test_no_change_passes() -> None:
    report = evaluate(side(BASE), side(BASE), GateOptions())
    assert report.passed, report.failures
    assert report.overall.pairs == 30 and report.overall.mean_difference == 0.0


def test_a_small_drop_within_max_drop_passes_and_beyond_it_fails() -> None:
    lowered = side([t - 0.02 for t in BASE])  # nothing flips
    assert evaluate(side(BASE), lowered, GateOptions(max_drop=0.05)).passed
    report = evaluate(side(BASE), lowered, GateOptions(max_drop=0.01))
    assert rules(report) == [RULE_DROP]


def test_a_drop_inside_the_judge_noise_floor_passes_with_the_reason() -> None:
    lowered = side([t - 0.02 for t in BASE])
    assert rules(evaluate(side(BASE), lowered, GateOptions())) == [RULE_DROP]
    # σw = 0.1 over 30 pairs: floor 1.96 · 0.1 · √(2/30) ≈ 0.0506 > the 0.02 drop.
    report = evaluate(side(BASE), lowered, GateOptions(), sigma_w_total=0.1)
    assert report.passed
    assert report.overall.noise_floor == pytest.approx(1.96 * 0.1 * (2 / 30) ** 0.5)
    assert "within the judge's noise floor" in report.overall.notes[0]
    # A drop beyond the floor still fails.
    assert rules(evaluate(side(BASE), side([t - 0.4 for t in BASE]), GateOptions(), sigma_w_total=0.1)) == [RULE_MCNEMAR, RULE_DROP]


def test_differing_criteria_hashes_fail_with_the_reason() -> None:
    report = evaluate(side(BASE), side(BASE, h="b" * 64), GateOptions())
    assert rules(report) == [RULE_HASH]
    assert "aaaaaaaaaaaa…" in report.failures[0].message and "bbbbbbbbbbbb…" in report.failures[0].message


def test_too_few_pairs_fail_and_nothing_compared_never_passes() -> None:
    assert rules(evaluate(side(BASE[:5]), side(BASE[:5]), GateOptions())) == [RULE_TOO_FEW]
    # No shared external id at all: zero pairs.
    others = [GateItem(f"other{n}", HASH, "completed", False, True, 0.9) for n in range(30)]
    report = evaluate(side(BASE), others, GateOptions())
    assert rules(report) == [RULE_TOO_FEW] and report.counts["only_in_candidate"] == 30
    assert rules(evaluate([], [], GateOptions())) == [RULE_HASH]


def test_errored_and_partial_candidate_items_count_as_failures() -> None:
    candidate = side(BASE)
    errored = [item(n, 0.0, status="failed") for n in range(10)]
    partial = [item(n, 0.9, partial=True) for n in range(10, 20)]
    report = evaluate(side(BASE), errored + partial + candidate[20:], GateOptions())
    assert RULE_MCNEMAR in rules(report)
    assert report.overall.pass_to_fail == 20 and report.counts["candidate_not_usable"] == 20
    reasons = {i.external_id: i.reason for i in report.items if not i.passed}
    assert reasons["q000"] == "pass→fail: failed: judge timed out"
    assert reasons["q010"].startswith("pass→fail: partial")


def test_unfinished_items_make_the_gate_incomplete() -> None:
    candidate = side(BASE)[:-1] + [item(29, 0.0, status="pending")]
    report = evaluate(side(BASE), candidate, GateOptions())
    assert report.incomplete and rules(report) == [RULE_INCOMPLETE]


def test_holm_step_down() -> None:
    # m = 3: the smallest against α/3, the next against α/2, the last against α.
    assert holm_levels([0.01, 0.04, 0.02], 0.05) == pytest.approx([0.05 / 3, 0.05, 0.05 / 2])
    # The second smallest is not below α/2: it and everything after it cannot be rejected.
    assert holm_levels([0.001, 0.2, 0.03], 0.05) == pytest.approx([0.05 / 3, 0.0, 0.05 / 2])
    assert holm_levels([0.5, 0.001], 0.05) == pytest.approx([0.05, 0.025])


def test_a_regression_in_one_slice_fails_that_slice_after_holm() -> None:
    n = 30
    base, cand = [], []
    for k in range(n):
        for s in ("billing", "shipping", "returns"):
            base.append(GateItem(f"{s}{k}", HASH, "completed", False, True, 0.8, s))
            # billing: 12 of 30 go pass→fail (McNemar p ≈ 0.0005 < 0.05/3); the others keep passing.
            regress = s == "billing" and k < 12
            cand.append(GateItem(f"{s}{k}", HASH, "completed", False, not regress, 0.3 if regress else 0.8, s))
    report = evaluate(base, cand, GateOptions(by="metadata.product", max_drop=0.2))
    by_name = {s.name: s for s in report.slices}
    assert by_name["billing"].gated and not by_name["billing"].verdicts.passed
    assert by_name["billing"].verdicts.adjusted_alpha == pytest.approx(0.05 / 3)
    assert by_name["shipping"].verdicts.passed and by_name["returns"].verdicts.passed
    assert any(f.message.startswith("slice 'billing'") for f in report.failures)


def test_holm_keeps_a_borderline_slice_that_one_test_alone_would_fail() -> None:
    # 6 pass→fail and none back: McNemar p = 0.03125 < 0.05 alone, but not below 0.05/2 with 2 slices.
    base, cand = [], []
    for s in ("a", "b"):
        for k in range(20):
            base.append(GateItem(f"{s}{k}", HASH, "completed", False, True, 0.8, s))
            regress = s == "a" and k < 6
            cand.append(GateItem(f"{s}{k}", HASH, "completed", False, not regress, 0.4 if regress else 0.8, s))
    only_a = evaluate([b for b in base if b.slice == "a"], [c for c in cand if c.slice == "a"], GateOptions(max_drop=1))
    assert rules(only_a) == [RULE_MCNEMAR]
    sliced = evaluate(base, cand, GateOptions(by="metadata.team", max_drop=1, min_pairs=10))
    by_name = {s.name: s for s in sliced.slices}
    assert by_name["a"].verdicts.passed and by_name["a"].verdicts.adjusted_alpha == pytest.approx(0.025)


def test_small_slices_are_flagged_not_gated() -> None:
    base = side(BASE, slice="common") + [GateItem("tiny", HASH, "completed", False, True, 0.9, "rare")]
    cand = side(BASE, slice="common") + [GateItem("tiny", HASH, "failed", False, None, None, "rare")]
    report = evaluate(base, cand, GateOptions(by="metadata.kind"))
    rare = next(s for s in report.slices if s.name == "rare")
    assert not rare.gated and rare.verdicts.failures[0].rule == RULE_TOO_FEW
    assert report.passed


def test_options_refuse_bad_values() -> None:
    with pytest.raises(BadRequest, match="alpha"):
        GateOptions(alpha=1.5)
    with pytest.raises(BadRequest, match="metadata.KEY"):
        GateOptions(by="product")


def test_results_lines_are_read_and_bad_ones_named() -> None:
    line = {"external_id": "q1", "criteria_hash": HASH, "status": "completed", "partial": False, "passed": True,
            "total_score": 0.9, "item": {"metadata": {"product": "billing", "tier": 2}}}
    [one] = items_from_results([json.dumps(line)], by="metadata.product", source="r.jsonl")
    assert one.usable and one.slice == "billing"
    [two] = items_from_results([json.dumps(line)], by="metadata.tier", source="r.jsonl")
    assert two.slice == "2"
    with pytest.raises(BadRequest, match=r"r.jsonl, line 2: not a results line \(no 'criteria_hash' field\)"):
        items_from_results([json.dumps(line), json.dumps({"external_id": "x"})], by=None, source="r.jsonl")
