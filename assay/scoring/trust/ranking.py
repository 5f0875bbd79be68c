"""The statistics of pairwise judgments: one pair's outcome from its two orders, a head-to-head of two
systems, and Bradley-Terry strengths of many. Pure functions (numbers in, numbers out), each checked
against a known case in ``tests/scoring/test_ranking.py``.

One pair
    Each order gives B's share of the pair: 1 (B better), ½ (tie), 0 (A better). The same share in both
    orders is the pair's outcome; a share that changes with the order is a tie, counted as a *position
    inconsistency* (the judge answered by position, not content).

Head-to-head (two systems)
    Wins / ties / losses of B against A; B's win rate, ties as half a win, with the percentile bootstrap
    95 % interval of ``stats.paired_bootstrap`` over the pairs (fixed seed); the two-sided exact sign test
    on the decisive pairs (wins against losses, each ½ under "no difference": ``scipy.stats.binomtest``;
    1.0 without a decisive pair); and the share of pairs whose verdict changed with the order.

Bradley-Terry (two or more systems)
    P(i beats j) = exp(s_i) / (exp(s_i) + exp(s_j)). Strengths are fitted by ``choix.ilsr_pairwise``
    (iterative Luce spectral ranking) on the pairs' outcomes: a decisive pair counts as two wins of its
    winner, a tie as one win each way, so a tie is half a win for both. A system that never loses
    would get an infinite strength by maximum likelihood; the fit is regularised with ``BT_ALPHA``
    (choix's ``alpha``: an L2 penalty on the strengths, as if every pair of systems had a little
    evidence of being equal), which keeps every strength finite and pulls thin evidence toward 0.
    Strengths are centred on 0 (only differences mean anything). The 95 % intervals come from
    ``BT_RESAMPLES`` bootstrap resamples of the *items* (all of an item's pairs together, never single
    pairs: an item's pairs share its difficulty), fixed seed, percentile method. The ranking sorts by
    strength; ``rank_interval`` gives each system's best and worst rank over the resamples' middle 95 %.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.scoring.trust.stats import BOOTSTRAP_SEED, CONFIDENCE, paired_bootstrap

B_WINS, TIE, A_WINS = 1.0, 0.5, 0.0
BT_ALPHA = 0.1
BT_RESAMPLES = 500
# Items resampled at once are capped so a bootstrap stays a few seconds: over it, fewer resamples.
BT_MAX_RESAMPLED_PAIRS = 5_000_000
BT_MIN_RESAMPLES = 50


def pair_outcome(first: float, second: float) -> tuple[float, bool]:
    """(B's share of the pair, whether the verdict changed with the order) from its two orders' shares."""
    if first == second:
        return first, False
    return TIE, True


@dataclass(frozen=True)
class HeadToHead:
    pairs: int
    wins: int  # of B
    ties: int
    losses: int
    win_rate: float | None
    win_rate_low: float | None
    win_rate_high: float | None
    interval_note: str | None
    sign_test_p: float
    inconsistent: int
    inconsistency_rate: float | None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def head_to_head(outcomes: Sequence[float], inconsistent: Sequence[bool]) -> HeadToHead:
    """B against A over the pairs' outcomes (B's share of each) and their position inconsistencies."""
    values = np.asarray(outcomes, dtype=float)
    wins = int(np.sum(values == B_WINS))
    losses = int(np.sum(values == A_WINS))
    ties = int(values.size) - wins - losses
    rate = paired_bootstrap(values)
    decisive = wins + losses
    # Imported here: scipy costs a second of CPU to import, and every worker, API and CLI process would pay it.
    from scipy.stats import binomtest

    p = float(binomtest(wins, decisive, 0.5).pvalue) if decisive else 1.0
    flips = int(sum(bool(x) for x in inconsistent))
    return HeadToHead(
        pairs=int(values.size),
        wins=wins,
        ties=ties,
        losses=losses,
        win_rate=rate.mean,
        win_rate_low=rate.ci_low,
        win_rate_high=rate.ci_high,
        interval_note=rate.note,
        sign_test_p=p,
        inconsistent=flips,
        inconsistency_rate=flips / values.size if values.size else None,
    )


@dataclass(frozen=True)
class Comparison:
    """One judged pair: systems ``a`` and ``b`` (indexes) on item ``item``, B's share of the pair."""

    item: str
    a: int
    b: int
    outcome: float


def _choices(comparisons: Sequence[Comparison]) -> list[tuple[int, int]]:
    """choix's (winner, loser) list: a decisive pair twice, a tie once each way (half a win each)."""
    out: list[tuple[int, int]] = []
    for c in comparisons:
        if c.outcome == B_WINS:
            out += [(c.b, c.a)] * 2
        elif c.outcome == A_WINS:
            out += [(c.a, c.b)] * 2
        else:
            out += [(c.a, c.b), (c.b, c.a)]
    return out


def fit_strengths(systems: int, comparisons: Sequence[Comparison], alpha: float = BT_ALPHA) -> np.ndarray:
    """Regularised Bradley-Terry strengths, centred on 0; all 0 without a comparison."""
    data = _choices(comparisons)
    if not data:
        return np.zeros(systems)
    # Imported here: choix (it imports scipy) costs a second of CPU to import, and every worker, API and CLI process would pay it.
    import choix

    strengths = np.asarray(choix.ilsr_pairwise(systems, data, alpha=alpha), dtype=float)
    return strengths - strengths.mean()


@dataclass(frozen=True)
class Strength:
    system: int
    strength: float
    low: float | None
    high: float | None
    rank: int  # 1 = strongest
    rank_best: int | None
    rank_worst: int | None
    pairs: int
    wins: float  # ties as half

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _ranks(strengths: np.ndarray) -> np.ndarray:
    """1 for the strongest; equal strengths share the better rank."""
    return np.array([1 + int(np.sum(strengths > s + 1e-12)) for s in strengths])


def bradley_terry(
    systems: int, comparisons: Sequence[Comparison], *, resamples: int = BT_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[list[Strength], int]:
    """Each system's strength with its bootstrap interval over items, its rank and rank interval, best
    first; and the number of resamples drawn (0 with fewer than two items: no interval)."""
    fitted = fit_strengths(systems, comparisons)
    by_item: dict[str, list[Comparison]] = defaultdict(list)
    for c in comparisons:
        by_item[c.item].append(c)
    items = sorted(by_item)
    count = 0
    low = high = rank_low = rank_high = None
    if len(items) >= 2:
        count = max(min(resamples, BT_MIN_RESAMPLES), min(resamples, BT_MAX_RESAMPLED_PAIRS // max(1, len(comparisons))))
        rng = np.random.default_rng(seed)
        draws = np.empty((count, systems))
        for r in range(count):
            picked = rng.integers(0, len(items), size=len(items))
            draws[r] = fit_strengths(systems, [c for i in picked for c in by_item[items[i]]])
        tail = (1 - CONFIDENCE) / 2
        low, high = np.quantile(draws, [tail, 1 - tail], axis=0)
        ranks = np.array([_ranks(d) for d in draws])
        rank_low, rank_high = np.quantile(ranks, [tail, 1 - tail], axis=0)
    totals = np.zeros(systems)
    wins = np.zeros(systems)
    for c in comparisons:
        totals[[c.a, c.b]] += 1
        wins[c.b] += c.outcome
        wins[c.a] += 1 - c.outcome
    ranks_now = _ranks(fitted)
    out = [
        Strength(
            system=s,
            strength=float(fitted[s]),
            low=None if low is None else min(float(low[s]), float(fitted[s])),
            high=None if high is None else max(float(high[s]), float(fitted[s])),
            rank=int(ranks_now[s]),
            rank_best=None if rank_low is None else int(np.floor(rank_low[s])),
            rank_worst=None if rank_high is None else int(np.ceil(rank_high[s])),
            pairs=int(totals[s]),
            wins=float(wins[s]),
        )
        for s in range(systems)
    ]
    return sorted(out, key=lambda x: (x.rank, x.system)), count
