"""Validity of the ``pandas_codegen`` suite on the labelled set (issue 19, pandas half), without the
judge. Every candidate of every labelled case (tests/scoring/pandas/validity_cases.py) is scored as
the pipeline would score it, in the sandbox; the figures are printed per class of cause:

- cases, correct candidates that pass, wrong candidates that pass;
- the lowest total of a correct candidate and the highest total of a wrong one.

Goals (issue 19.10): every correct candidate passes, no wrong candidate passes, and the lowest
correct total is above the highest wrong total (over every class whose items carry a truth). In the
``no_truth`` class (neither reference code nor an expected result) nothing may pass, correct or not
(invariant 7): its totals are shown, and left out of the lowest/highest comparison.

    .venv/bin/python -m bench.validity_pandas [--verbose]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from assay.scoring.sandbox import SandboxClient, SandboxLimits, set_sandbox_client
from tests.scoring.pandas.scoring import Scored, load_pandas_suite, score_item
from tests.scoring.pandas.validity_cases import CLASSES, LABELLED, LabelledCase


@dataclass
class ClassFigures:
    cases: int = 0
    correct: list[tuple[str, Scored]] = field(default_factory=list)
    wrong: list[tuple[str, Scored]] = field(default_factory=list)

    @staticmethod
    def _totals(scored: list[tuple[str, Scored]]) -> list[float]:
        return [s.total if s.total is not None else 0.0 for _, s in scored]

    def lowest_correct(self) -> float | None:
        return min(self._totals(self.correct), default=None)

    def highest_wrong(self) -> float | None:
        return max(self._totals(self.wrong), default=None)


def _label(case: LabelledCase, index: int, right: bool) -> str:
    return f"{case.name}/{'correct' if right else 'wrong'}{index}"


def measure(verbose: bool = False) -> dict[str, ClassFigures]:
    suite = load_pandas_suite()
    figures = {name: ClassFigures() for name in CLASSES}
    for case in LABELLED:
        row = figures[case.cls]
        row.cases += 1
        for right, candidates in ((True, case.correct), (False, case.wrong)):
            for index, candidate in enumerate(candidates):
                scored = score_item(case.item(candidate), suite)
                (row.correct if right else row.wrong).append((_label(case, index, right), scored))
                if verbose:
                    parts = " ".join(f"{n}={c.score if c.score is None else round(c.score, 2)}" for n, c in scored.components.items())
                    total = "failed" if scored.total is None else f"{scored.total:.3f}"
                    print(f"  {_label(case, index, right):<40} total={total} passed={scored.passed} {parts}")
    return figures


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report(verbose: bool = False) -> bool:
    """Print the figures; True when every goal is met."""
    client = SandboxClient(limits=SandboxLimits(wall_seconds=10.0, cpu_seconds=10, memory_mb=1024))
    set_sandbox_client(client)
    try:
        figures = measure(verbose)
    finally:
        set_sandbox_client(None)
        client.close()
    print("pandas_codegen validity (labelled set, no judge)")
    print(f"{'class':<10} {'cases':>5} {'correct pass':>13} {'wrong pass':>11} {'lowest correct':>15} {'highest wrong':>14}")
    met = True
    with_truth_correct: list[float] = []
    with_truth_wrong: list[float] = []
    for name, row in figures.items():
        correct_pass = sum(s.passed for _, s in row.correct)
        wrong_pass = sum(s.passed for _, s in row.wrong)
        print(f"{name:<10} {row.cases:>5} {correct_pass:>6}/{len(row.correct):<6} {wrong_pass:>4}/{len(row.wrong):<6} "
              f"{_fmt(row.lowest_correct()):>15} {_fmt(row.highest_wrong()):>14}")
        if name == "no_truth":
            met &= correct_pass == 0 and wrong_pass == 0
            continue
        met &= correct_pass == len(row.correct) and wrong_pass == 0
        with_truth_correct += ClassFigures._totals(row.correct)
        with_truth_wrong += ClassFigures._totals(row.wrong)
        for label, scored in row.correct:
            if not scored.passed:
                print(f"    correct not passing: {label} total={_fmt(scored.total)} {scored.blockers or ''}")
        for label, scored in row.wrong:
            if scored.passed:
                print(f"    wrong passing: {label} total={_fmt(scored.total)}")
    lowest, highest = min(with_truth_correct), max(with_truth_wrong)
    separated = lowest > highest
    met &= separated
    print(f"classes with a truth: lowest correct {lowest:.3f} {'>' if separated else '<='} highest wrong {highest:.3f}")
    print("no_truth: nothing may pass (correctness cannot be established)")
    print(f"goals {'met' if met else 'NOT met'}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="print every candidate's components")
    args = parser.parse_args()
    return 0 if report(args.verbose) else 1


if __name__ == "__main__":
    sys.exit(main())
