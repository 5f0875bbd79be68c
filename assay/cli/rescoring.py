"""Re-scoring, on the embedded store or through the API: ``rescore`` (as the nightly run does) and ``diff`` (two criteria hashes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from assay.cli.common import (
    ApiKey,
    changes_table,
    console,
    difference_cell,
    exit_unless_finished,
    fail,
    mean_cell,
    out,
    print_json,
    started,
    summary_table,
)
from assay.cli.gating import AsJson
from assay.cli.stores import DEFAULT_DB, EmbeddedDb, OptionalApiUrl, open_store
from assay.scoring.trust import LIST_LIMIT


def rescore(
    suite: Annotated[
        str,
        typer.Option(
            "--suite",
            "-s",
            help="Suite to re-score under its current criteria: its name, or (embedded) its file's path, "
            "registered first as `assay run --suite FILE` does.",
        ),
    ],
    stale_only: Annotated[
        bool, typer.Option(help="Only items scored under older criteria (not never-scored ones).")
    ] = False,
    partial: Annotated[
        bool, typer.Option(help="Also items whose current score is partial (judge skipped for lack of a key).")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Only print the count and the estimated calls, tokens, dollars.")] = False,
    lane: Annotated[str, typer.Option(help="realtime, or batch (the judge provider's batch API: half price, slower).")] = "realtime",
    budget: Annotated[Optional[float], typer.Option(min=0.000001, help="Judge spend limit in US dollars.")] = None,
    wait: Annotated[
        bool,
        typer.Option(help="Show progress until the run's batch finishes (exit 3 when it does not); embedded, always."),
    ] = False,
    as_json: AsJson = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Re-score a suite's stale (and never-scored) items under its current criteria, as the nightly
    run does; old scores are kept as history. Prints the run's batch id.

    On the embedded store (--db) the run is scored here, through the in-process worker pool as
    `assay run` does, progress on stderr; through the API (--api-url) the API's workers score it."""
    if lane not in ("realtime", "batch"):
        fail(f"--lane must be realtime or batch, not {lane!r}")
    options = {"stale_only": stale_only, "partial": partial, "dry_run": dry_run, "lane": lane, "budget_usd": budget}
    with open_store(db, api_url, api_key) as store:
        answer = store.rescore(suite, options)
        console.print(f"suite {answer['suite']} · criteria {answer['criteria_hash'][:12]} · {answer['selection']}")
        created = f"re-scoring batch [bold]{answer['batch_id']}[/bold]"
        nothing = "dry run: nothing was created" if dry_run else "nothing to re-score"
        # wait=True: an embedded run is scored here whether or not --wait is given
        if not started(answer, budget, answer["batch_id"], created=created, nothing=nothing, as_json=as_json, wait=True):
            return
        view = store.score_rescore(answer, options, wait)
    if view is None:
        if as_json:
            print_json(answer)
        return
    if as_json:
        print_json({**answer, "batch": view})
    else:
        out.print(summary_table(view))
    exit_unless_finished(view)


def _diff_summary_table(diff: dict[str, Any]) -> Table:
    s = diff["summary"]
    table = Table(title=f"criteria {diff['from_hash'][:12]}… → {diff['to_hash'][:12]}… · suite {diff['suite'] or 'any'}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("items compared", str(s["items_compared"]))
    table.add_row("only under from / only under to", f"{s['items_only_from']} / {s['items_only_to']}")
    table.add_row("mean total old → new", f"{mean_cell(s['mean_old_total'])} → {mean_cell(s['mean_new_total'])}")
    table.add_row("mean delta [95 % CI]", difference_cell({**s, "mean_difference": s["mean_delta"]}))
    table.add_row("wins / ties / losses of to", f"{s['wins']} / {s['ties']} / {s['losses']}")
    table.add_row("pass→fail / fail→pass", f"{s['pass_to_fail']} / {s['fail_to_pass']} · McNemar p = {s['mcnemar_p_value']:.4g}")
    for c in s["components"]:
        table.add_row(f"{escape(c['component'])} shift (n={c['n']})", difference_cell({**c, "mean_difference": c["mean_shift"]}))
    if s["item_noise_floor"] is not None:
        table.add_row("per-item noise floor", f"±{s['item_noise_floor']:.3f}")
    for side in ("from", "to"):
        if s[f"components_only_{side}"]:
            table.add_row(f"components only under {side}", ", ".join(s[f"components_only_{side}"]))
    table.add_row("cost of the run (USD)", f"{s['cost_usd']:.4f}")
    table.add_row("same items under from (USD)", f"{s['cost_usd_from']:.4f}")
    return table


def _version_hash(versions: list[dict[str, Any]], suite: str, number: int) -> str:
    if not 1 <= number <= len(versions):
        fail(f"--versions: suite {suite!r} has no version {number}; it has {len(versions)} (see `assay suite show {suite}`)")
    return str(versions[number - 1]["criteria_hash"])


def _value(value: Any) -> str:
    return "–" if value is None else str(value)


def print_criteria_change(change: dict[str, Any]) -> None:
    """What changed from one criteria to the other, before the score deltas (stdout)."""
    if not change["changed"]:
        out.print("criteria change: none in what is scored (the hashes differ in how it is written)", highlight=False)
        return
    out.print("[bold]criteria change[/bold]")
    if change["threshold"]:
        out.print(f"  threshold {change['threshold']['from']:g} → {change['threshold']['to']:g}", highlight=False)
    for side, sign in (("components_added", "+"), ("components_removed", "-")):
        for name in change[side]:
            out.print(f"  {sign} component {escape(name)} ({side.split('_')[1]})", highlight=False)
    if change["fields"]:
        out.print(f"  fields {escape(_value(change['fields']['from']))} → {escape(_value(change['fields']['to']))}", highlight=False)
    for component in change["components"]:
        for c in component["changes"]:
            where = f"  {escape(component['component'])}.{c['what']}"
            if "diff" in c:
                out.print(f"{where}:", highlight=False)
                out.print(c["diff"], highlight=False, markup=False)
            else:
                out.print(f"{where} {escape(_value(c['from']))} → {escape(_value(c['to']))}", highlight=False)


def diff(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Compare this suite's scores only.")],
    from_hash: Annotated[
        Optional[str], typer.Option("--from", help="Old criteria hash, or a unique prefix (8+ hex characters).")
    ] = None,
    to_hash: Annotated[
        Optional[str], typer.Option("--to", help="New criteria hash, or a unique prefix (8+ hex characters).")
    ] = None,
    versions: Annotated[
        Optional[tuple[int, int]],
        typer.Option(help="Old and new criteria version of the suite (`assay suite show S` lists them), instead of --from/--to."),
    ] = None,
    csv_file: Annotated[
        Optional[Path], typer.Option("--csv", dir_okay=False, help="Also write every compared item to this CSV file (streamed).")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=LIST_LIMIT, help="How many items to list by |delta| and how many flips.")
    ] = 10,
    as_json: AsJson = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Compare the scores of two criteria hashes over the items scored under both.

    Counts the latest completed score per item and hash. Prints the items compared (and those scored
    under only one hash), mean totals and delta with its bootstrap 95 % interval, wins / ties / losses,
    pass→fail and fail→pass flips with McNemar's exact test, the mean shift of each component the two
    criteria share with its interval, the judge's noise floor beside each mean (or "no noise floor
    measured" without `assay calibrate` on both hashes) and the cost of the new run; then the items
    whose total moved most and the items that flipped. Beside them, what changed in the criteria:
    the threshold, components added or removed, weights, metric versions and arguments, each judge's
    provider, model and settings, and its rubric and prompt as a unified diff.
    """
    if (versions is None) == (from_hash is None or to_hash is None) or (versions and (from_hash or to_hash)):
        fail("give --versions A B, or --from H1 --to H2")
    with open_store(db, api_url, api_key) as store:
        if versions is not None:
            listed = store.criteria_versions(suite)["versions"]
            from_hash, to_hash = (_version_hash(listed, suite, number) for number in versions)
        moved = store.diff(suite, from_hash, to_hash, limit, flips_only=False)
        flips = store.diff(suite, from_hash, to_hash, limit, flips_only=True)
        if as_json:
            print_json({**moved, "flips": flips["items"], "flips_total": flips["total"]})
        else:
            print_criteria_change(moved["criteria_change"])
            out.print(_diff_summary_table(moved))
            if moved["items"]:
                out.print(changes_table(f"largest |delta| ({len(moved['items'])} of {moved['total']})", moved["items"], "old", "new"))
            if flips["items"]:
                out.print(changes_table(f"flips ({len(flips['items'])} of {flips['total']})", flips["items"], "old", "new"))
        if csv_file is None:
            return
        store.write_diff_csv(suite, from_hash, to_hash, csv_file)
    console.print(f"{moved['summary']['items_compared']} compared items written to [bold]{csv_file}[/bold]")
