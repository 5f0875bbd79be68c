"""The CI gate: ``assay gate``, and what ``run --fail-under/--baseline``, ``submit --wait --fail-under``
and ``compare --fail-on-regression`` share with it: reading a side (a results file, a batch in the
embedded store or through the API), printing the verdict, ``--junit`` and the exit code.

The rule itself is the domain's (:mod:`assay.scoring.trust.gate`); this module only reads and prints."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from assay.cli.common import (
    EXIT_GATE_FAILED,
    EXIT_INCOMPLETE,
    ApiKey,
    console,
    exit_unless_finished,
    fail,
    out,
    print_json,
    signed,
)
from assay.cli.stores import EmbeddedDb, OptionalApiUrl, sources

FAILING_ITEMS_SHOWN = 20

Junit = Annotated[
    Optional[Path],
    typer.Option("--junit", dir_okay=False, help="Write JUnit XML here: one test case per item, failures with the reason."),
]
FailUnder = Annotated[
    Optional[float],
    typer.Option(min=0.0, max=1.0, help="Exit 1 when the pass rate (passed / all items; errored and partial count as failures) is under RATE."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")]
MaxDrop = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="Fail when the mean total's 95 % interval lies wholly below −D.")
]
Alpha = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="Fail when McNemar's p is under A with more pass→fail than fail→pass flips.")
]
MinPairs = Annotated[int, typer.Option(min=1, help="Fail when fewer pairs than this were compared (per slice: not gated).")]
By = Annotated[
    Optional[str],
    typer.Option(
        help="Report each slice by metadata.KEY (slices under the minimum size are flagged small); "
        "a gate gates each slice too (Holm-corrected)."
    ),
]


# --- the verdict ----------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _interval(v: Any) -> str:
    if v.ci_low is None:
        return signed(v.mean_difference)
    return f"{signed(v.mean_difference)} [{v.ci_low:+.3f}, {v.ci_high:+.3f}]"


def print_gate(report: Any) -> None:
    """The verdict on stdout: what was compared, the statistics, which rule failed, the failing items."""
    v, c = report.overall, report.counts
    verdict = "[green]PASSED[/green]" if report.passed else "[red]FAILED[/red] (" + ", ".join(
        sorted({f.rule for f in report.failures})) + ")"
    out.print(f"gate {verdict}: {escape(report.candidate)} against {escape(report.baseline)}")
    if report.criteria_hash:
        out.print(f"  criteria {report.criteria_hash[:16]}…", highlight=False)
    out.print(
        f"  pairs {c['pairs']} · baseline not usable {c['excluded_baseline_not_usable']} · only in baseline "
        f"{c['only_in_baseline']} · only in candidate {c['only_in_candidate']} · candidate not usable "
        f"{c['candidate_not_usable']} (counted as failures)",
        highlight=False,
    )
    if v.pairs:
        out.print(
            f"  pass rate {_rate(v.baseline_pass_rate)} → {_rate(v.candidate_pass_rate)} · pass→fail {v.pass_to_fail} / "
            f"fail→pass {v.fail_to_pass} · McNemar p = {v.p_value:.4g} (α {report.options.alpha:g})",
            highlight=False,
        )
        floor = f"noise floor ±{v.noise_floor:.4f}" if v.noise_floor is not None else "no noise floor measured"
        out.print(
            f"  mean total difference {_interval(v)} (max drop {report.options.max_drop:g}) · {floor}", highlight=False
        )
    for note in v.notes:
        out.print(f"  note: {escape(note)}", highlight=False)
    if report.slices:
        out.print(_slices_table(report))
    for failure in report.failures:
        out.print(f"  [red]✗ {failure.rule}[/red]: {escape(failure.message)}", highlight=False)
    failing = [i for i in report.items if not i.passed]
    for i in failing[:FAILING_ITEMS_SHOWN]:
        out.print(f"  failing item {escape(i.external_id or '(no external id)')}: {escape(i.reason or '')}", highlight=False)
    if len(failing) > FAILING_ITEMS_SHOWN:
        out.print(f"  … and {len(failing) - FAILING_ITEMS_SHOWN} more failing item(s) (--junit or --json lists them all)")


def _slices_table(report: Any) -> Table:
    table = Table(title=f"slices by {report.options.by} (Holm-corrected)")
    for column in ("slice", "pairs", "pass rate", "p→f / f→p", "McNemar p", "Holm α", "mean difference", "verdict"):
        table.add_column(column)
    for s in report.slices:
        v = s.verdicts
        verdict = "too few pairs: not gated" if not s.gated else "passed" if v.passed else "FAILED " + ", ".join(f.rule for f in v.failures)
        table.add_row(
            escape(s.name), str(v.pairs), f"{_rate(v.baseline_pass_rate)} → {_rate(v.candidate_pass_rate)}",
            f"{v.pass_to_fail} / {v.fail_to_pass}", f"{v.p_value:.4g}", _holm_cell(s),
            _interval(v), verdict,
        )
    return table


def _holm_cell(s: Any) -> str:
    if not s.gated:
        return "–"
    # Level 0: Holm stopped at a smaller p-value, so this slice cannot be rejected.
    return f"{s.verdicts.adjusted_alpha:.4g}" if s.verdicts.adjusted_alpha > 0 else "stopped"


def write_junit(target: Path, name: str, items: Sequence[Any], overall: Sequence[tuple[str, str]]) -> None:
    """``items``: the gate's item outcomes; ``overall``: (rule, message) failures of the run as a whole."""
    from assay.scoring.reports.junit import Case, SuiteFailure
    from assay.scoring.reports.junit import write_junit as write

    tests, failures = write(
        target, name, (Case(i.external_id, i.passed, i.reason) for i in items), [SuiteFailure(r, m) for r, m in overall]
    )
    console.print(f"JUnit XML: {tests} test case(s), {failures} failure(s) in {target}")


def finish_gate(report: Any, *, junit: Path | None, as_json: bool, name: str, quiet: bool = False) -> None:
    """Print the verdict (or its JSON; nothing when ``quiet``: the caller printed it), write the JUnit
    XML, exit 1 on a regression, 3 when incomplete."""
    if quiet:
        pass
    elif as_json:
        print_json(report.to_dict())
    else:
        print_gate(report)
    if junit is not None:
        write_junit(junit, name, report.items, [(f.rule, f.message) for f in report.failures])
    if report.incomplete:
        raise typer.Exit(EXIT_INCOMPLETE)
    if not report.passed:
        raise typer.Exit(EXIT_GATE_FAILED)


def pass_rate_failure(items: Sequence[Any], fail_under: float | None) -> tuple[str, str] | None:
    """("fail_under", why) when the pass rate over every item is under ``fail_under`` (no items: under)."""
    if fail_under is None:
        return None
    passed = sum(1 for i in items if i.usable and i.passed)
    rate = passed / len(items) if items else 0.0
    if items and rate >= fail_under:
        return None
    return "fail_under", f"pass rate {100 * rate:.1f}% ({passed} of {len(items)} items) is under {100 * fail_under:g}%"


def finish_run(
    view: dict[str, Any], candidate: str, *, fail_under: float | None, baseline: Path | None, options: Any,
    junit: Path | None, as_json: bool, db: Path, api_url: str | None = None, api_key: str | None = None,
) -> None:
    """After `run` or `submit --wait`: the pass rate against --fail-under, the gate against --baseline,
    --junit and --json, then the exit code (3 when the batch did not finish, 1 on a failure)."""
    from assay.scoring.trust.gate import item_outcome

    with sources(db, api_url, api_key) as opened:
        if baseline is not None:
            report, items = opened.gate(str(baseline), candidate, options)
        else:
            report, (items, _) = None, opened.side(candidate, None)
    rate = pass_rate_failure(items, fail_under)
    failures = ([(f.rule, f.message) for f in report.failures] if report else []) + ([rate] if rate else [])
    if as_json:
        print_json({
            "batch": view,
            "results": candidate,
            "passed": not failures and view["status"] == "completed",
            "failures": [{"rule": r, "message": m} for r, m in failures],
            "gate": report.to_dict() if report else None,
        })
    else:
        if report is not None:
            print_gate(report)
        if rate is not None:
            out.print(f"[red]✗ {rate[0]}[/red]: {escape(rate[1])}", highlight=False)
        elif fail_under is not None:
            out.print(f"pass rate at or over {100 * fail_under:g}%", highlight=False)
    if junit is not None:
        write_junit(junit, f"batch {view['batch_id']}", report.items if report else [item_outcome(i) for i in items], failures)
    exit_unless_finished(view)
    if report is not None and report.incomplete:
        raise typer.Exit(EXIT_INCOMPLETE)
    if failures:
        raise typer.Exit(EXIT_GATE_FAILED)


def gate_options(max_drop: float, alpha: float, min_pairs: int, by: str | None) -> Any:
    from assay.scoring.errors import AssayError
    from assay.scoring.trust.gate import GateOptions

    try:
        return GateOptions(alpha=alpha, max_drop=max_drop, min_pairs=min_pairs, by=by)
    except AssayError as exc:
        fail(exc.message)


def gate(
    baseline: Annotated[str, typer.Argument(help="The baseline: a results file (`assay run --out`, `assay results`) or a batch id.")],
    candidate: Annotated[str, typer.Argument(help="The candidate: a results file or a batch id.")],
    max_drop: MaxDrop = 0.0,
    alpha: Alpha = 0.05,
    min_pairs: MinPairs = 10,
    by: By = None,
    junit: Junit = None,
    as_json: AsJson = False,
    db: EmbeddedDb = Path(".assay/embedded.db"),
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Gate CANDIDATE against BASELINE: exit 1 on a regression beyond the judge's noise.

    Items are paired by external id. It fails when McNemar's p < ALPHA with more pass→fail than
    fail→pass flips, or when the mean total's 95 % interval lies wholly below −MAX_DROP — and, when
    the judge's noise was measured (`assay calibrate`), the drop exceeds its floor. Errored and partial
    candidate items count as failures. Different criteria hashes or fewer than MIN_PAIRS pairs fail
    with the reason; unfinished items exit 3. Batches are read from the embedded store (--db), or
    through the API with --api-url.
    """
    options = gate_options(max_drop, alpha, min_pairs, by)
    with sources(db, api_url, api_key) as opened:
        report, _ = opened.gate(baseline, candidate, options)
    finish_gate(report, junit=junit, as_json=as_json, name="assay gate")
