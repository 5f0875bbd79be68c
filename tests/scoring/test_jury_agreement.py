"""Inter-judge agreement of a jury's members, against known values: Cohen's kappa and its quadratic
weighting worked by hand, Krippendorff's alpha equal to the library's on the same matrix (missing
verdicts included), and None with the reason where a statistic is undefined."""

from __future__ import annotations

import math

import krippendorff
import pytest

from assay.scoring.suites.loader import parse_suite
from assay.scoring.trust.jury_agreement import alpha, component_agreement, kappa


def test_cohens_kappa_by_hand():
    # Observed agreement 3/4; each rater's pass rate 1/2 and 1/4: chance 1/2*1/4 + 1/2*3/4 = 1/2.
    assert kappa([True, True, False, False], [True, False, False, False], [False, True]) == pytest.approx(0.5)
    assert kappa(["a", "b", "c"], ["a", "b", "c"], ["a", "b", "c"]) == pytest.approx(1.0)
    # Both raters gave one category throughout: no disagreement was possible by chance.
    assert kappa([True, True], [True, True], [False, True]) is None


def test_quadratic_weighted_kappa_by_hand():
    # Grades 1..3; pairs (1,1), (2,3), (3,3), (1,2). Weights ((i-j)/2)^2: 0, 1/4, 1.
    a, b = [1, 2, 3, 1], [1, 3, 3, 2]
    observed = (0 + 0.25 + 0 + 0.25) / 4
    marginal_a = {1: 0.5, 2: 0.25, 3: 0.25}
    marginal_b = {1: 0.25, 2: 0.25, 3: 0.5}
    chance = sum(marginal_a[i] * marginal_b[j] * ((i - j) / 2) ** 2 for i in (1, 2, 3) for j in (1, 2, 3))
    assert kappa(a, b, [1, 2, 3], quadratic=True) == pytest.approx(1 - observed / chance)
    # One step apart counts less than two: quadratic kappa is higher than the unweighted one here.
    assert kappa(a, b, [1, 2, 3], quadratic=True) > kappa(a, b, [1, 2, 3])


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_is_the_librarys_with_missing_verdicts(level):
    matrix = [[0, 1, 2, 2, math.nan, 1], [0, 1, 1, 2, 0, math.nan], [1, 1, 2, 2, 0, 1]]
    domain = [0, 1, 2] if level != "interval" else None
    value, reason = alpha(matrix, level, domain)
    assert reason is None
    assert value == pytest.approx(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level, value_domain=domain))


def test_alpha_is_none_with_the_reason_when_undefined():
    assert alpha([[1, 1], [1, 1]], "nominal", [0, 1]) == (None, "every verdict is the same: alpha is undefined")
    assert alpha([[1, math.nan], [math.nan, 0]], "nominal", [0, 1]) == (None, "no item has verdicts from two members")


def test_a_scale_jury_is_ordinal_with_quadratic_kappa_per_pair(local_config):
    suite = """
name: j
kind: generic
threshold: 0.5
components:
  quality:
    weight: 1
    judge:
      rubric: How good is the answer?
      verdict: {type: scale, min: 1, max: 5}
      judges:
        - {provider: anthropic, model: claude-haiku-5-5}
        - {provider: openai, model: gpt-5-mini}
      aggregate: median
"""
    jury = parse_suite(suite, config_dir=local_config, env={}, origin="api").criteria.components["quality"].jury
    scores = ["s1", "s2", "s3", "s4"]
    values = {"claude-haiku-5-5": {"s1": 1, "s2": 3, "s3": 5, "s4": 4}, "gpt-5-mini": {"s1": 2, "s2": 3, "s3": 5}}
    report = component_agreement(jury, values, scores)
    assert report["level"] == "ordinal" and report["members"]["gpt-5-mini"]["answered"] == 3
    matrix = [[1 - 1, 3 - 1, 5 - 1, 4 - 1], [2 - 1, 3 - 1, 5 - 1, math.nan]]
    expected = krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal", value_domain=[0, 1, 2, 3, 4])
    assert report["alpha"] == pytest.approx(expected)
    (pair,) = report["pairs"]
    assert pair["items"] == 3 and pair["equal"] == pytest.approx(2 / 3)
    assert pair["statistic"] == "quadratic_weighted_kappa"
    assert pair["kappa"] == pytest.approx(kappa([1, 3, 5], [2, 3, 5], [1, 2, 3, 4, 5], quadratic=True))
