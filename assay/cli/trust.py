"""How far to trust a score: ``calibrate`` (through the API) and ``noise`` (the judge's noise), ``compare``
(two batches); ``noise`` and ``compare`` on the embedded store too."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from assay.cli.common import (
    EXIT_INCOMPLETE,
    ApiKey,
    ApiUrl,
    api_client,
    changes_table,
    console,
    difference_cell,
    fail,
    mean_cell,
    out,
    print_json,
    request,
    slice_name,
    started,
)
from assay.cli.gating import Alpha, AsJson, By, Junit, MaxDrop, MinPairs, finish_gate, gate_options
from assay.cli.stores import DEFAULT_DB, EmbeddedDb, OptionalApiUrl, open_store, sources
from assay.scoring.trust import LIST_LIMIT


def _noise_table(floor: dict[str, Any]) -> Table:
    table = Table(title=f"judge noise · criteria {floor['criteria_hash'][:12]} · run {floor['calibration_run_id'][:8]}")
    for column in ("component", "σw", "items"):
        table.add_column(column)

    def sigma(value: float | None) -> str:
        return f"{value:.4f}" if value is not None else "—"

    for name, value in floor["sigma_w"].items():
        table.add_row(name, sigma(value), str(floor["items_by_component"].get(name, 0)))
    table.add_row("total", sigma(floor["sigma_w_total"]), str(floor["items"]))
    flips = floor["flip_share"]
    table.caption = (
        f"{floor['repeats']} repeats per item; pass/fail flipped on "
        + (f"{100 * flips:.1f}% of items" if flips is not None else "— (no item had two completed repeats)")
    )
    return table


def calibrate(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Suite whose judge noise to measure (current criteria).")],
    sample: Annotated[int, typer.Option(min=1, max=1000, help="Stored items to judge (chosen by item id hash).")],
    repeats: Annotated[int, typer.Option(min=2, max=20, help="Times each item is judged.")],
    budget: Annotated[
        Optional[float],
        typer.Option(
            min=0.000001,
            help="Judge spend limit in US dollars. Default: the API's ASSAY_CALIBRATION_MAX_USD cap, and a "
            "run estimated over it is refused.",
        ),
    ] = None,
    lane: Annotated[str, typer.Option(help="realtime, or batch (the judge provider's batch API: half price, slower).")] = "realtime",
    dry_run: Annotated[bool, typer.Option(help="Only print the sample size and the estimated calls, tokens, dollars.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait for the run to finish and print the noise it measured.")] = False,
    as_json: AsJson = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Measure the judge's noise: judge SAMPLE stored items of a suite REPEATS times each under its
    current criteria (the same items every time: the smallest SHA-256 of suite and item id). When the
    run's batch finishes, the pooled within-item standard deviation σw of each judge component and of
    the total, and the share of items whose pass/fail flipped, are stored (`GET /api/v1/suites/{name}/noise`).
    Prints the run's id."""
    if lane not in ("realtime", "batch"):
        fail(f"--lane must be realtime or batch, not {lane!r}")
    body = {"sample": sample, "repeats": repeats, "budget_usd": budget, "lane": lane, "dry_run": dry_run}
    with api_client(api_url, api_key) as client:
        answer = request(client.post, f"/api/v1/suites/{suite}/calibrations", json=body)
        console.print(f"suite {answer['suite']} · criteria {answer['criteria_hash'][:12]} · {answer['sample']} item(s) × {answer['repeats']}")
        run = answer["calibration"]
        run_id = run["id"] if run else None
        created = f"calibration run [bold]{run_id}[/bold] (batch {run['batch_id']})" if run else ""
        if not started(answer, budget, run_id, created=created, nothing="dry run: nothing was created", as_json=as_json, wait=wait):
            return
        while run["status"] == "running":
            time.sleep(1.0)
            run = request(client.get, f"/api/v1/suites/{answer['suite']}/calibrations/{run['id']}")
    if as_json:
        print_json({**answer, "calibration": run})
    elif run["noise"] is not None:
        out.print(_noise_table(run["noise"]))
    if run["noise"] is None:
        fail(f"calibration run {run['id']} ended {run['status']} (batch {run['batch_status']}) without a noise estimate", EXIT_INCOMPLETE)


def noise(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Suite whose measured judge noise to show.")],
    criteria_hash: Annotated[Optional[str], typer.Option(help="Only this criteria hash (64 hex characters).")] = None,
    as_json: AsJson = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """The judge's noise floor of each criteria hash of a suite (its latest calibration run), from the
    embedded store (--db) or through the API (--api-url)."""
    with open_store(db, api_url, api_key) as store:
        answer = store.noise(suite, criteria_hash)
    if as_json:
        print_json(answer)
        return
    if not answer["noise"]:
        out.print(answer["note"])
        return
    for floor in answer["noise"]:
        current = " (current)" if floor["criteria_hash"] == answer["current_criteria_hash"] else ""
        out.print(_noise_table(floor), f"criteria {floor['criteria_hash']}{current}")


def _compare_table(report: dict[str, Any]) -> Table:
    a, b = report["a"], report["b"]
    table = Table(title=f"batch b {b['batch_id']} against batch a {a['batch_id']} (differences are b − a)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, side in (("a", a), ("b", b)):
        table.add_row(f"batch {name}", f"{escape(side['suite'])} · {side['criteria_hash'][:12]}… · {side['status']}")
        c = side["counts"]
        table.add_row(
            f"  scores of {name}",
            f"{c['usable']} usable · {c['partial']} partial · {c['failed']} failed · {c['pending']} pending · "
            f"{c['cancelled']} cancelled",
        )
        table.add_row(
            f"  unmatched in {name}",
            f"{c['only_here']} only here · {c['no_external_id']} without an external id · "
            f"{c['repeated_external_id']} with a repeated one",
        )
    table.add_row("pairs matched / paired / excluded", f"{report['matched']} / {report['paired']} / {report['excluded']}")
    total = report["total"]
    table.add_row("mean total a → b", f"{mean_cell(total['mean_a'])} → {mean_cell(total['mean_b'])}")
    table.add_row("mean difference [95 % CI]", difference_cell(total))
    table.add_row("wins / ties / losses of b", f"{report['wins']} / {report['ties']} / {report['losses']}")
    rate = report["pass_rate"]
    table.add_row("pass rate a → b", f"{mean_cell(rate['mean_a'])} → {mean_cell(rate['mean_b'])}")
    table.add_row("pass-rate difference [95 % CI]", difference_cell(rate))
    m = report["mcnemar"]
    table.add_row("McNemar (pass→fail / fail→pass)", f"{m['pass_to_fail']} / {m['fail_to_pass']} · p = {m['p_value']:.4g}")
    for c in report["components"]:
        table.add_row(f"{escape(c['name'])} shift (n={c['n']})", difference_cell(c))
    for side in ("a", "b"):
        if report[f"components_only_{side}"]:
            table.add_row(f"components only in {side}", escape(", ".join(report[f"components_only_{side}"])))
    if report["item_noise_floor"] is not None:
        table.add_row("per-item noise floor", f"±{report['item_noise_floor']:.3f}")
    return table


def _slices_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"by {escape(report['by'])}, the metadata of batch b's items")
    for column in ("slice", "pairs", "mean total a → b", "mean difference [95 % CI]", "pass rate a → b", "McNemar"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    for s in report["slices"]:
        total, rate, m = s["total"], s["pass_rate"], s["mcnemar"]
        table.add_row(
            slice_name(s["slice"]),
            str(s["slice"]["n"]),
            f"{mean_cell(total['mean_a'])} → {mean_cell(total['mean_b'])}",
            difference_cell(total),
            f"{mean_cell(rate['mean_a'])} → {mean_cell(rate['mean_b'])}",
            f"{m['pass_to_fail']} / {m['fail_to_pass']} · p = {m['p_value']:.4g}",
        )
    table.caption = "; ".join(f"{slice_name(s['slice'])}: {s['slice']['note']}" for s in report["slices"] if s["slice"]["kind"] == "other") or None
    return table


def compare(
    batch_a: Annotated[str, typer.Argument(help="The baseline batch id.")],
    batch_b: Annotated[str, typer.Argument(help="The batch compared against it.")],
    csv_file: Annotated[
        Optional[Path], typer.Option("--csv", dir_okay=False, help="Also write every pair to this CSV file (streamed).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=LIST_LIMIT, help="How many moved and flipped items to list.")] = 10,
    fail_on_regression: Annotated[
        bool, typer.Option(help="Gate BATCH_B against BATCH_A as `assay gate` does: exit 1 on a regression.")
    ] = False,
    max_drop: MaxDrop = 0.0,
    alpha: Alpha = 0.05,
    min_pairs: MinPairs = 10,
    by: By = None,
    junit: Junit = None,
    as_json: AsJson = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Compare BATCH_B against BATCH_A pair by pair (items matched by external id, each batch's own scores).

    Prints the pairs matched and left out (partial, failed, pending; items in one batch only), the mean
    difference of the total with its bootstrap 95 % interval, wins / ties / losses, the pass-rate
    difference with McNemar's exact test, each shared component's shift, and beside each mean difference
    the judge's noise floor (or "no noise floor measured" without `assay calibrate`); then the items that
    moved most and those that flipped. Warns when the batches have different criteria or suites. With
    --by metadata.KEY, the same per slice (by the metadata of BATCH_B's items). With
    --fail-on-regression, the gate's verdict follows (`assay gate`, per slice too with --by) and
    decides the exit code. Batches are read from the embedded store (--db), or through the API with
    --api-url.
    """
    if junit is not None and not fail_on_regression:
        fail("--junit belongs to the gate: add --fail-on-regression")
    options = gate_options(max_drop, alpha, min_pairs, by) if fail_on_regression else None
    with open_store(db, api_url, api_key) as store:
        report = store.compare(batch_a, batch_b, by)
        if csv_file is not None:
            store.write_compare_csv(batch_a, batch_b, csv_file)
            console.print(f"every pair written to [bold]{csv_file}[/bold]")
    gate_report = None
    if options is not None:
        with sources(db, api_url, api_key) as opened:
            gate_report, _ = opened.gate(batch_a, batch_b, options)
    if as_json:
        print_json({**report, "gate": gate_report.to_dict() if gate_report else None})
    else:
        for warning in report["warnings"]:
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
        out.print(_compare_table(report))
        if report.get("slices") is not None:
            out.print(_slices_table(report))
        if report["moved_most"]:
            moved = report["moved_most"][:limit]
            out.print(changes_table(f"moved most ({len(moved)} of {report['paired']})", moved, "a", "b"))
        if report["flipped"]:
            flipped = report["flipped"][:limit]
            flips = report["mcnemar"]["pass_to_fail"] + report["mcnemar"]["fail_to_pass"]
            out.print(changes_table(f"flipped ({len(flipped)} of {flips})", flipped, "a", "b"))
    if gate_report is not None:
        # The comparison's JSON above carries the gate's; only the verdict's text, JUnit and exit code remain.
        finish_gate(gate_report, junit=junit, as_json=as_json, name="assay compare", quiet=as_json)
