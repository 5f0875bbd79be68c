"""``assay pairwise``: compare batches item by item with a suite's pairwise rubric, through the API or
embedded (``--db``: the SQLite store of ``assay run`` and an in-process worker); ``assay pairwise
cancel`` and ``resume`` a run, through the API (as ``assay cancel`` and ``resume`` a batch)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from assay.cli.common import (
    EXIT_INCOMPLETE,
    ApiKey,
    ApiUrl,
    api_client,
    console,
    fail,
    out,
    print_estimate,
    print_json,
    report_domain_error,
    request,
)
from assay.cli.gating import AsJson


def _rate(row: dict[str, Any]) -> str:
    if row["win_rate"] is None:
        return "—"
    interval = (
        f" [{row['win_rate_low']:.3f}, {row['win_rate_high']:.3f}]" if row["win_rate_low"] is not None else f" ({row['interval_note']})"
    )
    return f"{row['win_rate']:.3f}{interval}"


def _head_to_head_table(rows: list[dict[str, Any]], title: str, first: str) -> Table:
    table = Table(title=title)
    for column in (first, "pairs", "wins / ties / losses of b", "b's win rate [95 % CI]", "sign test p", "position-inconsistent"):
        table.add_column(column)
    for row in rows:
        rate = row["inconsistency_rate"]
        table.add_row(
            escape(str(row.get("value") or f"{row['b']} vs {row['a']}")),
            str(row["pairs"]),
            f"{row['wins']} / {row['ties']} / {row['losses']}",
            _rate(row),
            f"{row['sign_test_p']:.4g}",
            f"{row['inconsistent']} ({100 * rate:.1f}%)" if rate is not None else "—",
        )
    return table


def print_report(run: dict[str, Any], as_json: bool = False) -> None:
    """The run's report on stdout (its JSON with ``as_json``); exit 1 when the run ended without one."""
    report = run["report"]
    if as_json:
        print_json(run)
    if report is None:
        fail(f"pairwise run {run['id']} ended {run['status']} (batch {run['batch_status']}) without a report", EXIT_INCOMPLETE)
    if as_json:
        return
    pairs = report["pairs"]
    out.print(f"{pairs['judged']} pair(s) judged in both orders, {pairs['incomplete']} incomplete")
    out.print(_head_to_head_table(report["head_to_head"], "head to head", "b vs a"))
    if report["slices"]:
        out.print(_head_to_head_table(report["slices"]["values"], f"by {report['slices']['by']}", "slice"))
    board = report["leaderboard"]
    if board:
        table = Table(title=f"leaderboard · {board['model']} · alpha {board['alpha']} · {board['resamples']} item resamples")
        for column in ("rank", "system", "strength [95 % CI]", "rank range", "pairs", "wins (ties ½)"):
            table.add_column(column)
        for s in board["systems"]:
            interval = f" [{s['low']:+.3f}, {s['high']:+.3f}]" if s["low"] is not None else ""
            ranks = f"{s['rank_best']}–{s['rank_worst']}" if s["rank_best"] is not None else "—"
            table.add_row(str(s["rank"]), escape(s["label"]), f"{s['strength']:+.3f}{interval}", ranks, str(s["pairs"]), f"{s['wins']:g}")
        out.print(table)
    for moved in report["moved_most"]:
        out.print(f"  {escape(moved['external_id'])}: {escape(moved['winner'])} won ({escape(moved['b'])} vs {escape(moved['a'])})", highlight=False)


class _ComparisonByDefault(TyperGroup):
    """``assay pairwise A B …`` runs ``compare`` (batch ids are never a command's name), so the
    comparison reads as it always did beside ``assay pairwise cancel RUN`` and ``resume RUN``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["compare", *args]
        return super().parse_args(ctx, args)


pairwise_cli = typer.Typer(
    cls=_ComparisonByDefault,
    no_args_is_help=True,
    help="Compare batches item by item with a suite's pairwise rubric: `assay pairwise A B [C …] --suite S` "
    "(the compare command; see `assay pairwise compare --help`). `cancel` and `resume` act on a pairwise run.",
)
RunId = Annotated[str, typer.Argument(help="The pairwise run's id, as `assay pairwise` prints it.")]


@pairwise_cli.command("compare")
def pairwise(
    batches: Annotated[list[str], typer.Argument(help="Two or more batch ids: A B [C …] (B against A for two).")],
    suite: Annotated[str, typer.Option("--suite", "-s", help="Suite whose pairwise: rubric judges the pairs.")],
    label: Annotated[
        Optional[list[str]], typer.Option("--label", help="A name per batch, in order (default: the batch ids).")
    ] = None,
    by: Annotated[Optional[str], typer.Option(help="Slice the two-batch report by metadata.KEY of A's item.")] = None,
    budget: Annotated[Optional[float], typer.Option(min=0.000001, help="Judge spend limit in US dollars.")] = None,
    lane: Annotated[str, typer.Option(help="realtime, or batch (the provider's batch API: half price, slower).")] = "realtime",
    dry_run: Annotated[bool, typer.Option(help="Only plan the pairs and print the estimated calls, tokens, dollars.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait for the run to finish and print its report (always, with --db).")] = False,
    db: Annotated[
        Optional[Path], typer.Option(help="Run embedded on this SQLite store (assay run's --db) instead of through the API.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run (its report once finished) as JSON on stdout.")] = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Compare batches item by item (matched by external id) with the suite's pairwise rubric. Every
    pair is judged in both orders; a verdict that changes with the order is a tie and a position
    inconsistency. Two batches: B's wins / ties / losses, win rate with a bootstrap interval, sign test.
    Three or more: a Bradley-Terry leaderboard with item-bootstrap intervals. Prints the run's id."""
    if lane not in ("realtime", "batch"):
        fail(f"--lane must be realtime or batch, not {lane!r}")
    body: dict[str, Any] = {
        "suite": suite, "batches": batches, "labels": label or None, "by": by, "budget_usd": budget, "lane": lane, "dry_run": dry_run,
    }
    if db is not None:
        _embedded(body, db, as_json)
        return
    with api_client(api_url, api_key) as client:
        started = request(client.post, "/api/v1/pairwise", json=body)
        run = _started(started, budget, as_json)
        if run is None or not wait:
            if as_json:
                print_json(started)
            return
        while run["status"] == "running":
            time.sleep(1.0)
            run = request(client.get, f"/api/v1/pairwise/{run['id']}")
        print_report(run, as_json)


@pairwise_cli.command()
def cancel(run_id: RunId, as_json: AsJson = False, api_url: ApiUrl = "http://127.0.0.1:8000", api_key: ApiKey = None) -> None:
    """Cancel a pairwise run through the API: its queued pairs are dropped, the judged ones kept; no
    report. Prints the run (a run that already ended is a usage error, exit 2)."""
    with api_client(api_url, api_key) as client:
        run = request(client.post, f"/api/v1/pairwise/{_run_id(run_id)}/cancel")
    _print_run(run, as_json)


@pairwise_cli.command()
def resume(
    run_id: RunId,
    budget: Annotated[
        Optional[float], typer.Option(min=0.000001, help="New judge spend limit in US dollars, above the spend (omit: no limit).")
    ] = None,
    as_json: AsJson = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Resume a pairwise run the budget stopped, through the API, under a new budget: its stopped pairs
    go back to the judge, the judged ones are kept (never paid twice), and the report is made afresh
    when it finishes. Prints the run."""
    with api_client(api_url, api_key) as client:
        run = request(client.post, f"/api/v1/pairwise/{_run_id(run_id)}/resume", json={"budget_usd": budget})
    _print_run(run, as_json)


def _run_id(spec: str) -> uuid.UUID:
    try:
        return uuid.UUID(spec)
    except ValueError:
        fail(f"{spec!r} is not a pairwise run id (a UUID, as `assay pairwise` prints it)")


def _print_run(run: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(run)
        return
    progress = run["progress"] or {}
    spend = f"${run['spent_usd']:.4f}" + (f" of ${run['budget_usd']:.4f}" if run["budget_usd"] is not None else "")
    out.print(
        f"pairwise run {run['id']}: {run['status']} (batch {run['batch_id']} {run['batch_status']}) · "
        f"{progress.get('completed', 0)} of {progress.get('total', 0)} judgment(s) landed · spent {spend}",
        highlight=False,
    )


def _started(started: dict[str, Any], budget: float | None, as_json: bool) -> dict[str, Any] | None:
    """The plan and the estimate on stderr; the run's id first on stdout (not with --json)."""
    design = started["design"]
    console.print(
        f"suite {started['suite']} · pairwise criteria {started['criteria_hash'][:12]} · {design['pairs']} pair(s) over "
        f"{design['items']} item(s) ({design['rule']})"
    )
    for note in started["notes"]:
        console.print(f"  {note}", highlight=False)
    print_estimate(started["estimate"], budget)
    run = started["run"]
    if run is None:
        console.print("dry run: nothing was created")
        return None
    console.print(f"pairwise run [bold]{run['id']}[/bold] (batch {run['batch_id']})")
    if not as_json:
        print(run["id"], flush=True)
    return run


def _embedded(body: dict[str, Any], db: Path, as_json: bool) -> None:
    """Plan, judge and report the run in this process, on the SQLite store ``db``."""
    import uuid

    from assay.workers import embedded

    embedded.configure_environment(db)
    from assay.scoring.errors import AssayError
    from assay.scoring.store.db import migrate, transaction
    from assay.scoring.suites.criteria import register_all_suites
    from assay.scoring.suites.loader import load_model_catalog
    from assay.scoring.trust import pairwise as svc
    from assay.settings import get_settings

    migrate()
    settings = get_settings()
    try:
        batch_ids = [uuid.UUID(b) for b in body["batches"]]
    except ValueError as exc:
        fail(f"a batch id is a UUID: {exc}")
    try:
        with transaction() as session:
            register_all_suites(session, settings.config_dir)
            catalog = load_model_catalog(settings.config_dir)
            plan = svc.plan(session, body["suite"], batch_ids, catalog, labels=body["labels"], by=body["by"], lane=body["lane"])
            run, spend = svc.start(
                session, plan, catalog, created_by=os.environ.get("USER", "cli"), lane=body["lane"], budget_usd=body["budget_usd"]
            )
            started = {
                "suite": plan.suite, "criteria_hash": plan.criteria_hash, "design": plan.design, "notes": plan.notes,
                "estimate": spend.to_dict(), "run": None if body["dry_run"] else svc.run_view(session, run),
            }
            if body["dry_run"]:
                raise svc.DryRun(started)
            run_id, batch_id = run.id, run.batch_id
    except svc.DryRun as dry:
        _started(dry.result, body["budget_usd"], as_json)
        if as_json:
            print_json(dry.result)
        return
    except AssayError as exc:
        report_domain_error(exc)
        raise typer.Exit(2) from None
    _started(started, body["budget_usd"], as_json)
    try:
        embedded.run_batch(
            batch_id, concurrency=8, on_progress=lambda view: None, stall_seconds=settings.embedded_stall_seconds,
            log_file=db.with_suffix(".log"),
        )
    except embedded.Stalled as exc:
        fail(f"pairwise run {run_id} stopped: {exc} (the worker's log: {db.with_suffix('.log')})", EXIT_INCOMPLETE)
    with transaction() as session:
        print_report(svc.run_view(session, svc.get_run(session, run_id)), as_json)
