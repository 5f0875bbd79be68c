"""The statistics behind ``compare`` and ``diff``: paired bootstrap intervals, McNemar's exact test,
wins / ties / losses, and the judge's noise floor.

Every function is pure (arrays in, numbers out), so each is checked against a known case in
``tests/scoring/test_stats.py``.

Paired bootstrap of a mean difference
    The pairs' differences are resampled with replacement and the 2.5th and 97.5th percentiles of the
    resampled means are the 95 % interval (the percentile method). The generator is seeded with
    ``BOOTSTRAP_SEED`` and the differences are sorted first, so the same differences (in any order)
    always give the same interval. The work is capped: ``MAX_RESAMPLES`` (2,000) resamples while
    resamples × pairs stays under ``MAX_RESAMPLED_VALUES``; beyond that fewer resamples are drawn (never
    fewer than ``MIN_RESAMPLES``), in chunks of at most ``CHUNK_VALUES`` indices, so a million pairs take
    a couple of seconds and about 30 MB. Fewer than 2 pairs give no interval (``note`` says why);
    differences that are all equal give the zero-width interval [d, d] without resampling.

McNemar's exact test
    Only discordant pairs carry information about a change in pass rate: ``b`` pairs passed under A and
    failed under B, ``c`` the reverse. Under "no change" each discordant pair goes either way with
    probability ½, so the two-sided p-value is the exact binomial test of b successes in b + c trials
    (``scipy.stats.binomtest``). With no discordant pairs it is 1.0: nothing moved.

Noise floor
    σw is the judge's pooled within-item standard deviation (measured by calibration). The smallest
    mean difference over n pairs that the judge's own noise cannot explain (at 95 %) is
    1.96·σw·√(2/n) under one criteria hash and 1.96·√((σ1² + σ2²)/n) across two; one item's change
    must exceed 1.96·σw·√2 (or 1.96·√(σ1² + σ2²)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

BOOTSTRAP_SEED = 21
CONFIDENCE = 0.95
Z95 = 1.96
MAX_RESAMPLES = 2000
MIN_RESAMPLES = 200
MAX_RESAMPLED_VALUES = 200_000_000  # resamples × pairs: above it, fewer resamples
CHUNK_VALUES = 4_000_000  # indices drawn at once (int32: 16 MB, plus the gathered float64 values)
# Two totals closer than this are a tie: totals are sums of weighted floats, not exact.
TIE_TOLERANCE = 1e-9

NO_NOISE_FLOOR = "no noise floor measured"
FEWER_THAN_TWO = "fewer than 2 pairs: no interval"
ZERO_VARIANCE = "every pair moved by the same amount: zero-width interval"


@dataclass(frozen=True)
class MeanDifference:
    """The mean of paired differences with its bootstrap interval."""

    n: int
    mean: float | None  # None when n == 0
    ci_low: float | None  # None when n < 2
    ci_high: float | None
    resamples: int  # bootstrap resamples drawn (0 when the interval needs none)
    note: str | None  # why there is no interval, or why it has zero width


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on the discordant pairs."""

    pass_to_fail: int  # b: passed under A, failed under B
    fail_to_pass: int  # c: failed under A, passed under B
    discordant: int  # b + c
    p_value: float  # two-sided; 1.0 with no discordant pairs


@dataclass(frozen=True)
class Tally:
    """B against A, pair by pair: B higher is a win, equal (within TIE_TOLERANCE) a tie, lower a loss."""

    wins: int
    ties: int
    losses: int


def _as_array(values: ArrayLike) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(array)):
        raise ValueError("paired differences must be finite numbers")
    return array


def resamples_for(n: int, requested: int = MAX_RESAMPLES) -> int:
    """How many resamples ``paired_bootstrap`` draws for ``n`` pairs (the work cap)."""
    if n < 2:
        return 0
    return max(min(requested, MIN_RESAMPLES), min(requested, MAX_RESAMPLED_VALUES // n))


def paired_bootstrap(
    differences: ArrayLike,
    *,
    resamples: int = MAX_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> MeanDifference:
    """Mean of ``differences`` (B − A per pair) and its percentile bootstrap interval."""
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be between 0 and 1")
    diffs = np.sort(_as_array(differences))
    n = int(diffs.size)
    if n == 0:
        return MeanDifference(0, None, None, None, 0, FEWER_THAN_TWO)
    mean = float(diffs.mean())
    if n == 1:
        return MeanDifference(1, mean, None, None, 0, FEWER_THAN_TWO)
    if diffs[0] == diffs[-1]:
        value = float(diffs[0])
        return MeanDifference(n, value, value, value, 0, ZERO_VARIANCE)
    count = resamples_for(n, resamples)
    rng = np.random.default_rng(seed)
    per_chunk = max(1, CHUNK_VALUES // n)
    index_type = np.int32 if n < 2**31 else np.int64
    means = np.empty(count, dtype=np.float64)
    done = 0
    while done < count:
        rows = min(per_chunk, count - done)
        picks = rng.integers(0, n, size=(rows, n), dtype=index_type)
        means[done : done + rows] = diffs[picks].mean(axis=1)
        done += rows
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    # The resampled means can differ from the mean in the last bits; the interval always holds it.
    return MeanDifference(n, mean, min(float(low), mean), max(float(high), mean), count, None)


def mcnemar_exact(pass_to_fail: int, fail_to_pass: int) -> McNemar:
    """Two-sided exact McNemar test from the discordant counts."""
    if pass_to_fail < 0 or fail_to_pass < 0:
        raise ValueError("discordant counts cannot be negative")
    discordant = pass_to_fail + fail_to_pass
    if discordant == 0:
        return McNemar(0, 0, 0, 1.0)
    # Imported here: scipy costs a second of CPU to import, and every worker, API and CLI process would pay it.
    from scipy.stats import binomtest

    p_value = float(binomtest(pass_to_fail, discordant, 0.5, alternative="two-sided").pvalue)
    return McNemar(pass_to_fail, fail_to_pass, discordant, min(1.0, p_value))


def mcnemar_from_pairs(passed_a: Sequence[bool] | np.ndarray, passed_b: Sequence[bool] | np.ndarray) -> McNemar:
    """McNemar's test from the two verdicts of each pair."""
    a, b = np.asarray(passed_a, dtype=bool), np.asarray(passed_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError("both sides need one verdict per pair")
    return mcnemar_exact(int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b)))


def tally(differences: ArrayLike, tolerance: float = TIE_TOLERANCE) -> Tally:
    """Wins, ties and losses of B against A from the per-pair differences (B − A)."""
    diffs = _as_array(differences)
    wins = int(np.count_nonzero(diffs > tolerance))
    losses = int(np.count_nonzero(diffs < -tolerance))
    return Tally(wins, int(diffs.size) - wins - losses, losses)


def _check_sigma(*sigmas: float) -> None:
    for sigma in sigmas:
        if not math.isfinite(sigma) or sigma < 0:
            raise ValueError(f"a standard deviation must be a finite number ≥ 0, got {sigma}")


def mean_diff_floor_one_hash(sigma_w: float, n: int) -> float | None:
    """1.96·σw·√(2/n): the noise floor of a mean difference over n pairs under one criteria hash."""
    _check_sigma(sigma_w)
    return Z95 * sigma_w * math.sqrt(2 / n) if n > 0 else None


def mean_diff_floor_two_hashes(sigma_1: float, sigma_2: float, n: int) -> float | None:
    """1.96·√((σ1² + σ2²)/n): the noise floor of a mean difference over n pairs across two hashes."""
    _check_sigma(sigma_1, sigma_2)
    return Z95 * math.sqrt((sigma_1**2 + sigma_2**2) / n) if n > 0 else None


def item_change_floor(sigma_w: float) -> float:
    """1.96·σw·√2: one item's change under one hash that the judge's noise does not explain."""
    _check_sigma(sigma_w)
    return Z95 * sigma_w * math.sqrt(2)


def item_change_floor_two_hashes(sigma_1: float, sigma_2: float) -> float:
    """1.96·√(σ1² + σ2²): one item's change across two hashes that the judge's noise does not explain."""
    _check_sigma(sigma_1, sigma_2)
    return Z95 * math.sqrt(sigma_1**2 + sigma_2**2)


def mean_diff_floor(sigma_a: float | None, sigma_b: float | None, n: int, *, same_hash: bool) -> float | None:
    """The mean-difference floor for n pairs, or None when a side's σw was not measured (or n is 0)."""
    if same_hash:
        return None if sigma_a is None else mean_diff_floor_one_hash(sigma_a, n)
    if sigma_a is None or sigma_b is None:
        return None
    return mean_diff_floor_two_hashes(sigma_a, sigma_b, n)


def item_floor(sigma_a: float | None, sigma_b: float | None, *, same_hash: bool) -> float | None:
    """The per-item change floor, or None when a side's σw was not measured."""
    if same_hash:
        return None if sigma_a is None else item_change_floor(sigma_a)
    if sigma_a is None or sigma_b is None:
        return None
    return item_change_floor_two_hashes(sigma_a, sigma_b)
