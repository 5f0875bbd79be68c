"""``assay.scoring.trust.stats`` against known cases: McNemar's exact p-values worked by hand, bootstrap
intervals whose distribution can be enumerated, the noise-floor formulas with round numbers."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from assay.scoring.trust import stats


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (1, 9, 0.021484375),  # 2·(C(10,0) + C(10,1))/2¹⁰ = 22/1024
        (9, 1, 0.021484375),  # symmetric
        (0, 6, 0.03125),  # 2/2⁶
        (5, 5, 1.0),
        (3, 4, 1.0),
        (2, 8, 0.109375),  # 2·(1 + 10 + 45)/1024 = 112/1024
    ],
)
def test_mcnemar_exact_known_cases(b: int, c: int, p: float) -> None:
    result = stats.mcnemar_exact(b, c)
    assert result.p_value == pytest.approx(p, abs=1e-12)
    assert (result.pass_to_fail, result.fail_to_pass, result.discordant) == (b, c, b + c)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    assert stats.mcnemar_exact(0, 0) == stats.McNemar(0, 0, 0, 1.0)


def test_mcnemar_refuses_negative_counts() -> None:
    with pytest.raises(ValueError, match="negative"):
        stats.mcnemar_exact(-1, 3)


def test_mcnemar_from_pairs_counts_only_discordant_pairs() -> None:
    a = [True, True, False, False, True, False, False, False, False, False, False, False, False]
    b = [False, True, False, True, True, True, True, True, True, True, True, True, True]
    result = stats.mcnemar_from_pairs(a, b)
    assert (result.pass_to_fail, result.fail_to_pass) == (1, 9)
    assert result.p_value == pytest.approx(0.021484375, abs=1e-12)
    with pytest.raises(ValueError, match="one verdict per pair"):
        stats.mcnemar_from_pairs([True], [True, False])


def test_bootstrap_of_two_values_is_the_full_range() -> None:
    # Resampling {0, 1} twice: means 0, .5, 1 with chances ¼, ½, ¼; so the 2.5th and 97.5th percentiles
    # of 2,000 resampled means are 0 and 1.
    result = stats.paired_bootstrap([0.0, 1.0])
    assert (result.n, result.mean, result.ci_low, result.ci_high) == (2, 0.5, 0.0, 1.0)
    assert result.resamples == stats.MAX_RESAMPLES and result.note is None


def test_bootstrap_is_reproducible_and_ignores_the_order() -> None:
    diffs = np.random.default_rng(3).normal(0.05, 0.2, 500)
    first = stats.paired_bootstrap(diffs)
    assert stats.paired_bootstrap(diffs) == first
    assert stats.paired_bootstrap(diffs[::-1].copy()) == first
    other_seed = stats.paired_bootstrap(diffs, seed=99)
    assert other_seed.mean == first.mean and (other_seed.ci_low, other_seed.ci_high) != (first.ci_low, first.ci_high)


def test_bootstrap_interval_matches_the_normal_approximation() -> None:
    # For 4,000 differences with sd 0.2 the mean's standard error is 0.2/√4000 ≈ 0.00316: the 95 %
    # percentile interval is about ±1.96 of it around the mean.
    diffs = np.random.default_rng(5).normal(0.1, 0.2, 4000)
    result = stats.paired_bootstrap(diffs)
    se = diffs.std(ddof=0) / math.sqrt(diffs.size)
    assert result.ci_low < result.mean < result.ci_high
    assert result.ci_high - result.ci_low == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert (result.ci_low + result.ci_high) / 2 == pytest.approx(result.mean, abs=se / 2)


def test_bootstrap_with_no_pair_or_one_pair_has_no_interval() -> None:
    assert stats.paired_bootstrap([]) == stats.MeanDifference(0, None, None, None, 0, stats.FEWER_THAN_TWO)
    assert stats.paired_bootstrap([0.25]) == stats.MeanDifference(1, 0.25, None, None, 0, stats.FEWER_THAN_TWO)


def test_bootstrap_with_zero_variance_is_a_zero_width_interval() -> None:
    assert stats.paired_bootstrap([0.125] * 50) == stats.MeanDifference(50, 0.125, 0.125, 0.125, 0, stats.ZERO_VARIANCE)


def test_bootstrap_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="finite"):
        stats.paired_bootstrap([0.1, math.nan])
    with pytest.raises(ValueError, match="resamples"):
        stats.paired_bootstrap([0.1, 0.2], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        stats.paired_bootstrap([0.1, 0.2], confidence=1.0)


def test_resamples_are_capped_by_the_work() -> None:
    assert stats.resamples_for(1) == 0
    assert stats.resamples_for(1000) == 2000
    assert stats.resamples_for(100_000) == 2000
    assert stats.resamples_for(1_000_000) == 200
    assert stats.resamples_for(10_000_000) == stats.MIN_RESAMPLES
    assert stats.resamples_for(1000, requested=50) == 50


def test_a_million_pairs_fit_in_a_request() -> None:
    diffs = np.random.default_rng(8).normal(0.01, 0.2, 1_000_000)
    # CPU time, not wall time: the bound is on the work a request does, and other processes on a
    # busy machine (the parallel tests among them) stretch the wall clock, not the work.
    started = time.process_time()
    result = stats.paired_bootstrap(diffs)
    assert time.process_time() - started < 20
    assert result.resamples == 200
    se = 0.2 / 1000
    assert result.ci_high - result.ci_low == pytest.approx(2 * 1.96 * se, rel=0.25)


def test_tally_wins_ties_losses() -> None:
    assert stats.tally([0.25, 0.0, -0.5, 1e-12, -1e-12, 0.5]) == stats.Tally(wins=2, ties=3, losses=1)
    assert stats.tally([]) == stats.Tally(0, 0, 0)


def test_noise_floor_formulas() -> None:
    assert stats.mean_diff_floor_one_hash(0.1, 8) == pytest.approx(1.96 * 0.1 * 0.5)  # √(2/8) = ½
    assert stats.mean_diff_floor_two_hashes(0.3, 0.4, 4) == pytest.approx(1.96 * 0.25)  # √(.25/4) = ¼
    assert stats.item_change_floor(0.1) == pytest.approx(0.27718585822512665)
    assert stats.item_change_floor_two_hashes(0.3, 0.4) == pytest.approx(0.98)
    assert stats.mean_diff_floor_one_hash(0.1, 0) is None
    with pytest.raises(ValueError, match="standard deviation"):
        stats.item_change_floor(-0.1)


def test_floor_helpers_need_every_sigma_they_use() -> None:
    assert stats.mean_diff_floor(0.1, None, 8, same_hash=True) == pytest.approx(0.098)
    assert stats.mean_diff_floor(0.3, None, 4, same_hash=False) is None
    assert stats.mean_diff_floor(0.3, 0.4, 4, same_hash=False) == pytest.approx(0.49)
    assert stats.mean_diff_floor(None, 0.4, 4, same_hash=True) is None
    assert stats.item_floor(0.1, None, same_hash=True) == pytest.approx(0.27718585822512665)
    assert stats.item_floor(0.3, None, same_hash=False) is None
    assert stats.item_floor(0.3, 0.4, same_hash=False) == pytest.approx(0.98)
