"""Juries in suites: members, aggregation and quorum are criteria, validated in plain words; each
member is a row of its own with its own judge and fingerprint; the aggregation rules give known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.suites.jury import MemberOutcome, aggregate, weighted_median
from assay.scoring.suites.loader import parse_suite

SUITE = """
name: jury
kind: generic
threshold: 0.5
components:
  length:
    weight: 0.5
    metric: length_words
    version: 1
    args: {min: 1}
  correctness:
    weight: 0.5
    judge:
      rubric: Is the answer correct?
      verdict: VERDICT
      judges:
        - {provider: anthropic, model: claude-haiku-5-5}
        - {provider: openai, model: gpt-5-mini, weight: 2}
        - {provider: local, model: "qwen3:8b", name: qwen, temperature: 0}
      aggregate: AGGREGATE
      EXTRA
"""


def parse(config: Path, verdict: str = "{type: pass_fail}", aggregate: str = "majority", extra: str = "", text: str | None = None):
    body = text or SUITE.replace("VERDICT", verdict).replace("AGGREGATE", aggregate).replace("EXTRA", extra)
    return parse_suite(body, config_dir=config, env={}, origin="api")


def test_a_jury_is_three_member_rows_before_the_component(local_config):
    criteria = parse(local_config).criteria
    assert criteria.rows == [
        "length", "correctness@claude-haiku-5-5", "correctness@gpt-5-mini", "correctness@qwen", "correctness",
    ]
    assert criteria.judge_components == ["correctness"]
    assert criteria.judge_calls == ["correctness@claude-haiku-5-5", "correctness@gpt-5-mini", "correctness@qwen"]
    jury = criteria.components["correctness"].jury
    assert jury is not None and jury.min_members == 2  # default: a majority of three
    # Each member is its own judge: its provider, model and parameters, the jury's rubric and verdict.
    qwen = criteria.judge_for("correctness@qwen")
    assert (qwen.provider, qwen.model, qwen.parameters) == ("local", "qwen3:8b", {"temperature": 0})
    assert qwen.template == criteria.judge_for("correctness@gpt-5-mini").template == jury.template
    with pytest.raises(CriteriaError, match="is a jury"):
        criteria.judge_for("correctness")
    # A member's row weighs its share of the jury's weight (the total reads the jury alone).
    assert criteria.row_weight("correctness@gpt-5-mini") == pytest.approx(0.5 * 2 / 4)
    assert criteria.is_judge_call("correctness@qwen") and not criteria.is_judge_call("correctness")


def test_the_hash_covers_membership_and_aggregation_and_members_have_their_own_fingerprints(local_config):
    base = parse(local_config).criteria
    reweighted = parse(local_config, text=SUITE.replace("weight: 2", "weight: 3").replace("VERDICT", "{type: pass_fail}")
                       .replace("AGGREGATE", "majority").replace("EXTRA", "")).criteria
    quorum = parse(local_config, extra="min_members: 3").criteria
    fewer = parse(local_config, text=SUITE.replace('        - {provider: local, model: "qwen3:8b", name: qwen, temperature: 0}\n', "")
                  .replace("VERDICT", "{type: pass_fail}").replace("AGGREGATE", "majority").replace("EXTRA", "")).criteria
    hashes = {c.criteria_hash for c in (base, reweighted, quorum, fewer)}
    assert len(hashes) == 4
    # A member's fingerprint is its judge's: a new quorum or another member's weight re-pays no call.
    for other in (reweighted, quorum):
        assert other.component_fingerprint("correctness@qwen") == base.component_fingerprint("correctness@qwen")
        assert other.component_fingerprint("correctness") != base.component_fingerprint("correctness")
    assert base.component_fingerprint("correctness@qwen") != base.component_fingerprint("correctness@gpt-5-mini")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"aggregate": "mean"}, "aggregate 'mean' does not fit a pass_fail verdict; use majority"),
        ({"verdict": "{type: score}"}, "aggregate 'majority' does not fit a score verdict; use mean or median"),
        ({"extra": "min_members: 4"}, "min_members is 4, but the jury has only 3 members"),
        ({"extra": "model: claude-haiku-5-5"}, "model: a jury sets these per member, under judges:"),
        ({"aggregate": "vote"}, "aggregate: Input should be 'mean', 'median' or 'majority'"),
    ],
)
def test_a_bad_jury_is_refused_in_plain_words(local_config, change, message):
    with pytest.raises(CriteriaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(local_config, **change)


def test_duplicate_members_and_other_mistakes_are_refused(local_config):
    duplicate = SUITE.replace('{provider: local, model: "qwen3:8b", name: qwen, temperature: 0}', "{provider: anthropic, model: claude-haiku-5-5, name: again}")
    with pytest.raises(CriteriaError, match="members 'claude-haiku-5-5' and 'again' are the same judge"):
        parse(local_config, text=duplicate.replace("VERDICT", "{type: pass_fail}").replace("AGGREGATE", "majority").replace("EXTRA", ""))
    same_name = SUITE.replace("name: qwen", "name: gpt-5-mini")
    with pytest.raises(CriteriaError, match="two members are named gpt-5-mini"):
        parse(local_config, text=same_name.replace("VERDICT", "{type: pass_fail}").replace("AGGREGATE", "majority").replace("EXTRA", ""))
    alone = SUITE.split("        - {provider: openai")[0] + "      aggregate: majority\n"
    with pytest.raises(CriteriaError, match="a jury is a list of at least two members"):
        parse(local_config, text=alone.replace("VERDICT", "{type: pass_fail}"))
    with pytest.raises(CriteriaError, match=r"judges.0: unknown judge provider 'nowhere'"):
        parse(local_config, text=SUITE.replace("provider: anthropic", "provider: nowhere")
              .replace("VERDICT", "{type: pass_fail}").replace("AGGREGATE", "majority").replace("EXTRA", ""))
    with pytest.raises(CriteriaError, match="belong to a jury; name its members under judges:"):
        parse_suite(
            "name: x\nkind: generic\nthreshold: 0.5\ncomponents:\n  c:\n    weight: 1\n    judge:\n"
            "      rubric: r\n      verdict: {type: score}\n      aggregate: mean\n",
            config_dir=local_config, env={}, origin="api",
        )


def test_a_component_name_may_not_contain_the_member_separator(local_config):
    with pytest.raises(CriteriaError, match="component names may not contain '@'"):
        parse_suite(
            "name: x\nkind: generic\nthreshold: 0.5\ncomponents:\n  a@b:\n    weight: 1\n    metric: length_words\n"
            "    version: 1\n    args: {min: 1}\n",
            config_dir=local_config, env={}, origin="api",
        )


def outcomes(*answers):
    names = ["claude-haiku-5-5", "gpt-5-mini", "qwen"]
    return {
        name: MemberOutcome("ok", score, details) if score is not None else MemberOutcome("failed", None, None, "HTTP 500")
        for name, (score, details) in zip(names, answers, strict=True)
    }


def test_majority_with_a_contrarian_gives_the_majority_and_keeps_each_members_verdict(local_config):
    jury = parse(local_config).criteria.components["correctness"].jury
    # The heaviest member (gpt, weight 2) is the contrarian: two light votes (1 + 1) tie its 2, and a
    # tie goes to fail.
    result = aggregate("correctness", jury, outcomes((1.0, {"passed": True, "reasoning": "ok"}), (0.0, {"passed": False, "reasoning": "no"}), (1.0, {"passed": True, "reasoning": "ok"})))
    assert result.score == 0.0 and result.details["passed"] is False
    assert result.details["jury"]["votes"] == {"true": 2.0, "false": 2.0}
    assert result.details["jury"]["members"]["gpt-5-mini"]["verdict"] is False
    assert result.details["jury"]["members"]["qwen"]["reasoning"] == "ok"
    # With the light contrarian, the majority wins outright.
    result = aggregate("correctness", jury, outcomes((0.0, {"passed": False}), (1.0, {"passed": True}), (1.0, {"passed": True})))
    assert result.score == 1.0 and result.details["passed"] is True and result.details["jury"]["answered"] == 3


def test_below_the_quorum_the_jury_is_skipped_with_the_reason(local_config):
    jury = parse(local_config, extra="min_members: 3").criteria.components["correctness"].jury
    result = aggregate("correctness", jury, outcomes((1.0, {"passed": True}), (None, None), (1.0, {"passed": True})))
    assert result.score is None
    assert result.reason.startswith("jury: 2 of 3 members answered, fewer than min_members 3 (gpt-5-mini: failed (HTTP 500))")
    # The quorum of two holds with the same answers.
    jury = parse(local_config).criteria.components["correctness"].jury
    assert aggregate("correctness", jury, outcomes((1.0, {"passed": True}), (None, None), (1.0, {"passed": True}))).score == 1.0


def test_mean_median_and_labels(local_config):
    scored = parse(local_config, verdict="{type: score}", aggregate="mean").criteria.components["correctness"].jury
    answers = outcomes((0.2, {"score": 0.2}), (0.5, {"score": 0.5}), (1.0, {"score": 1.0}))
    assert aggregate("c", scored, answers).score == pytest.approx((0.2 + 2 * 0.5 + 1.0) / 4)
    median = parse(local_config, verdict="{type: score}", aggregate="median").criteria.components["correctness"].jury
    assert aggregate("c", median, answers).score == pytest.approx(0.5)
    assert weighted_median([(0.1, 1), (0.3, 1)]) == pytest.approx(0.2)  # equal weights: the ordinary median
    assert weighted_median([(0.1, 1), (0.3, 1), (0.9, 1), (1.0, 1)]) == pytest.approx(0.6)
    assert weighted_median([(0.1, 3), (0.3, 1), (0.9, 1)]) == pytest.approx(0.1)
    labels = parse(local_config, verdict="{type: labels, labels: {good: 1, meh: 0.5, bad: 0}}").criteria.components["correctness"].jury
    # good (1) against meh (2, the heavy member) and bad (1): meh wins.
    result = aggregate("c", labels, outcomes((1.0, {"label": "good"}), (0.5, {"label": "meh"}), (0.0, {"label": "bad"})))
    assert result.details["label"] == "meh" and result.score == 0.5
    # A tie between good and bad goes to the lower-scoring label.
    result = aggregate("c", labels, outcomes((1.0, {"label": "good"}), (None, None), (0.0, {"label": "bad"})))
    assert result.details["label"] == "bad" and result.score == 0.0
