"""``assay labels``: human labels, and how the judge agrees with them (embedded store or API)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from assay.cli.common import BY_HELP, ApiKey, fail, print_json, slice_text
from assay.cli.stores import DEFAULT_DB, EmbeddedDb, OptionalApiUrl, open_store

labels_cli = typer.Typer(
    help="Human labels, and how the judge agrees with them (the embedded store, --db, or the API, --api-url).",
    no_args_is_help=True,
)


LABEL_TYPES = {".csv": "text/csv", ".jsonl": "application/x-ndjson", ".ndjson": "application/x-ndjson"}


@labels_cli.command("push")
def labels_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A .csv or .jsonl file.")],
    suite: Annotated[str, typer.Option("--suite", "-s")],
    partial: Annotated[bool, typer.Option(help="Store the good rows when some are bad.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was stored as JSON on stdout.")] = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Upload human labels (POST /api/v1/suites/{name}/labels, or into the embedded store): CSV or
    JSONL, by the file's extension. Rows: item_id (or batch_id and external_id), passed and/or score
    (0..1), annotator, comment. A row without an annotator, or naming you, is your label; a row naming
    someone else imports their label, which never replaces one. Prints what was added, imported,
    replaced, skipped (and why)."""
    content_type = LABEL_TYPES.get(file.suffix.lower())
    if content_type is None:
        fail(f"{file.name}: name a .csv, .jsonl or .ndjson file (the extension decides the format)")
    with open_store(db, api_url, api_key) as store:
        stored = store.push_labels(suite, file.read_bytes(), content_type, partial)
    if as_json:
        print_json(stored)
        return
    typer.echo(
        f"suite {stored['suite']}: {stored['accepted']} label(s) stored ({stored['created']} new, "
        f"{stored['imported']} imported, {stored['replaced']} replaced)"
        + (f", {stored['skipped']} skipped" if stored["skipped"] else "")
        + (f", {stored['rejected']} bad row(s)" if stored["rejected"] else "")
    )
    for skipped in stored["skipped_lines"][:20]:
        typer.echo(f"  line {skipped['line']} skipped: {skipped['reason']}")
    for bad in stored["bad_lines"][:20]:
        typer.echo(f"  line {bad['line']}: {bad['reason']}")


def _ratio(value: float | None, reason: str | None = None) -> str:
    return f"{value:.3f}" if value is not None else f"- ({reason})" if reason else "-"


def _verdict_line(name: str, stats: dict[str, Any]) -> str:
    rho = stats["spearman"]
    return (
        f"  {name:<20} compared {stats['compared_items']:>5}  accuracy {_ratio(stats['accuracy'])}  "
        f"kappa {_ratio(stats['kappa'], stats['kappa_reason'])}  spearman {_ratio(rho['rho'], rho['reason'])}"
    )


def _slice_label(s: dict[str, Any]) -> str:
    return slice_text(s) + (f"  [small: {s['note']}]" if s["small"] else f"  [{s['note']}]" if s["note"] else "")


@labels_cli.command("agreement")
def labels_agreement(
    suite: Annotated[str, typer.Option("--suite", "-s")],
    criteria_hash: Annotated[Optional[str], typer.Option(help="Only this criteria hash (default: every labelled one).")] = None,
    by: Annotated[Optional[str], typer.Option(help=BY_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """How the suite's machine verdicts agree with its human labels, per criteria hash
    (GET /api/v1/suites/{name}/agreement): accuracy, Cohen's kappa, Spearman, confusion matrix,
    ties and the disagreeing items; the same for each judge component, and per slice with --by."""
    with open_store(db, api_url, api_key) as store:
        report = store.agreement(suite, criteria_hash, by)
    if as_json:
        print_json(report)
        return
    typer.echo(f"suite {report['suite']}: {report['labels']} label(s) on {report['labelled_items']} item(s)")
    if not report["hashes"]:
        typer.echo("no labelled item has a completed machine score yet")
    for h in report["hashes"]:
        current = " (current)" if h["criteria_hash"] == report["current_criteria_hash"] else ""
        c = h["confusion"]
        rho = h["spearman"]
        typer.echo(f"\ncriteria {h['criteria_hash'][:12]}{current}, pass at {h['threshold']:g}")
        typer.echo(f"  compared {h['compared_items']}, ties {h['ties']['count']}, labelled but not scored {h['unscored_items']}")
        typer.echo(f"  accuracy {_ratio(h['accuracy'])}   kappa {_ratio(h['kappa'], h['kappa_reason'])}")
        typer.echo(f"  spearman {_ratio(rho['rho'], rho['reason'])}" + (f" (p {rho['p_value']:.3g}, {rho['pairs']} pairs)" if rho["rho"] is not None else ""))
        typer.echo("                 people pass  people fail")
        typer.echo(f"  machine pass   {c['machine_pass_human_pass']:>11}  {c['machine_pass_human_fail']:>11}")
        typer.echo(f"  machine fail   {c['machine_fail_human_pass']:>11}  {c['machine_fail_human_fail']:>11}")
        for name, stats in h["components"].items():
            typer.echo(_verdict_line(f"component {name}", stats))
        for s in h.get("slices") or []:
            typer.echo(f"  slice {_slice_label(s)}")
            typer.echo("  " + _verdict_line("total", s["total"]))
            for name, stats in s["components"].items():
                typer.echo("  " + _verdict_line(f"component {name}", stats))
        for e in h["disagreeing"]["items"][:20]:
            machine = "pass" if e["machine_passed"] else "fail"
            people = "pass" if e["human_passed"] else "fail"
            typer.echo(f"  disagrees: {e['external_id'] or e['item_id']}  machine {machine} ({_ratio(e['machine_total'])}), people {people} ({e['human_pass_votes']}-{e['human_fail_votes']})")
