"""The statistics of pairwise judgments against known answers (``assay.scoring.trust.ranking``)."""

from __future__ import annotations

import itertools
import math

import choix
import numpy as np
import pytest
from scipy.stats import binomtest

from assay.scoring.trust.ranking import (
    A_WINS,
    B_WINS,
    BT_ALPHA,
    TIE,
    Comparison,
    bradley_terry,
    fit_strengths,
    head_to_head,
    pair_outcome,
)


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (B_WINS, B_WINS, (B_WINS, False)),
        (A_WINS, A_WINS, (A_WINS, False)),
        (TIE, TIE, (TIE, False)),
        # A judge that always picks the first position: B wins in one order, A in the other.
        (A_WINS, B_WINS, (TIE, True)),
        (B_WINS, TIE, (TIE, True)),
    ],
)
def test_a_verdict_that_changes_with_the_order_is_a_tie_and_an_inconsistency(first, second, expected):
    assert pair_outcome(first, second) == expected


def test_head_to_head_counts_ties_as_half_and_tests_only_the_decisive_pairs():
    outcomes = [B_WINS] * 6 + [TIE] * 2 + [A_WINS] * 2
    result = head_to_head(outcomes, [False] * 9 + [True])
    assert (result.pairs, result.wins, result.ties, result.losses) == (10, 6, 2, 2)
    assert result.win_rate == pytest.approx(0.7)
    assert result.win_rate_low < 0.7 < result.win_rate_high
    assert result.sign_test_p == pytest.approx(binomtest(6, 8, 0.5).pvalue)
    assert result.inconsistency_rate == pytest.approx(0.1)


def test_only_ties_give_a_half_win_rate_a_zero_width_interval_and_p_1():
    result = head_to_head([TIE] * 5, [True] * 5)
    assert (result.win_rate, result.win_rate_low, result.win_rate_high) == (0.5, 0.5, 0.5)
    assert result.sign_test_p == 1.0
    assert result.inconsistency_rate == 1.0


def test_no_pairs_give_no_rate():
    result = head_to_head([], [])
    assert (result.pairs, result.win_rate, result.inconsistency_rate) == (0, None, None)


def test_strengths_match_choix_on_the_doubled_decisive_and_split_tie_data():
    comparisons = [Comparison("i1", 0, 1, B_WINS), Comparison("i2", 0, 1, TIE), Comparison("i3", 1, 2, A_WINS)]
    expected = np.asarray(choix.ilsr_pairwise(3, [(1, 0), (1, 0), (0, 1), (1, 0), (1, 2), (1, 2)], alpha=BT_ALPHA))
    assert fit_strengths(3, comparisons) == pytest.approx(expected - expected.mean())


def test_a_system_that_never_loses_gets_a_finite_strength():
    comparisons = [Comparison(f"i{n}", 0, 1, B_WINS) for n in range(20)]
    strengths = fit_strengths(2, comparisons)
    assert all(math.isfinite(s) for s in strengths) and strengths[1] > strengths[0]


def test_bradley_terry_recovers_a_designed_order_with_item_bootstrap_intervals():
    # System s beats system t on an item when s > t, except on every fifth item where the lower one wins:
    # a clear order 3 > 2 > 1 > 0 with some noise.
    comparisons = []
    for n in range(40):
        for a, b in itertools.combinations(range(4), 2):
            upset = n % 5 == (a + b) % 5
            comparisons.append(Comparison(f"item{n}", a, b, A_WINS if upset else B_WINS))
    board, resamples = bradley_terry(4, comparisons, resamples=100)
    assert [s.system for s in board] == [3, 2, 1, 0]
    assert [s.rank for s in board] == [1, 2, 3, 4]
    assert resamples == 100
    for s in board:
        assert s.low <= s.strength <= s.high
        assert s.pairs == 40 * 3
    assert board[0].low > board[-1].high  # the best and the worst are told apart
    assert sum(s.wins for s in board) == len(comparisons)


def test_one_item_gives_strengths_without_intervals():
    board, resamples = bradley_terry(3, [Comparison("only", 0, 1, B_WINS), Comparison("only", 1, 2, B_WINS)])
    assert resamples == 0
    assert [s.system for s in board] == [2, 1, 0]
    assert all(s.low is None and s.rank_best is None for s in board)
