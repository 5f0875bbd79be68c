"""Issue 21: the agreement statistics, each checked against a known case."""

from __future__ import annotations

import pytest

from assay.scoring.trust.agreement import Confusion, spearman


def test_kappa_on_the_textbook_case():
    # Wikipedia's "Cohen's kappa" example: 50 proposals, both yes 20, A yes B no 5, A no B yes 10,
    # both no 15: observed 0.7, expected 0.5, kappa 0.4.
    confusion = Confusion(both_pass=20, machine_only=5, human_only=10, both_fail=15)
    assert confusion.n == 50
    assert confusion.accuracy() == pytest.approx(0.7)
    kappa, reason = confusion.kappa()
    assert kappa == pytest.approx(0.4) and reason is None


def test_kappa_of_full_and_of_chance_agreement():
    assert Confusion(both_pass=3, both_fail=2).kappa() == (pytest.approx(1.0), None)
    # Each side passes half, independently: agreement is what chance gives, kappa 0.
    assert Confusion(both_pass=1, machine_only=1, human_only=1, both_fail=1).kappa()[0] == pytest.approx(0.0)
    # Always opposite: kappa -1.
    assert Confusion(machine_only=2, human_only=2).kappa()[0] == pytest.approx(-1.0)


def test_kappa_is_undefined_without_items_or_when_both_sides_give_one_verdict():
    assert Confusion().accuracy() is None
    assert Confusion().kappa() == (None, "no item has both a machine verdict and a human majority")
    kappa, reason = Confusion(both_pass=4).kappa()
    assert kappa is None and "same verdict" in reason
    # One side constant, the other not: defined (0 here), not an error.
    assert Confusion(both_pass=2, human_only=2).kappa()[0] == pytest.approx(0.0)


def test_spearman_on_scipys_documented_case():
    # scipy.stats.spearmanr's documentation: [1, 2, 3, 4, 5] against [5, 6, 7, 8, 7].
    rho, p_value, reason = spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7])
    assert rho == pytest.approx(0.8207826816681233) and p_value == pytest.approx(0.0885870053135438) and reason is None
    assert spearman([0.1, 0.5, 0.9], [0.9, 0.4, 0.2])[0] == pytest.approx(-1.0)


def test_spearman_says_why_it_has_no_value():
    assert spearman([0.1, 0.2], [0.3, 0.4]) == (
        None, None, "2 item(s) with both a machine total and a human score; at least 3 are needed",
    )
    assert spearman([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])[2] == "every machine total is the same: the rank correlation is undefined"
    assert spearman([0.1, 0.2, 0.3], [1.0, 1.0, 1.0])[2] == "every human score is the same: the rank correlation is undefined"
