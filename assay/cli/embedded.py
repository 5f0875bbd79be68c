"""``assay run``: score a file embedded (SQLite and an in-process worker pool, no services)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from assay.cli.common import (
    BY_HELP,
    console,
    fail,
    live_printer,
    progress_bar,
    report_domain_error,
    sliced_summary_table,
    suite_path,
    summary_table,
)


def run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="JSONL or JSON array of items.")],
    suite: Annotated[
        str,
        typer.Option(
            "--suite",
            "-s",
            help="Suite name (config/suites/NAME.yaml), or the path of a suite file that is not installed "
            "(a value containing '/' or ending in .yaml, .yml or .json).",
        ),
    ],
    out: Annotated[Optional[Path], typer.Option(help="Results file (JSONL). Default: FILE's name + .results.jsonl")] = None,
    db: Annotated[Path, typer.Option(help="SQLite file that keeps the scores.")] = Path(".assay/embedded.db"),
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Worker threads.")] = 8,
    dataset: Annotated[
        Optional[list[str]],
        typer.Option(help="NAME=PATH: register table files (a file or folder of .csv/.parquet/.json) first."),
    ] = None,
    live: Annotated[
        Optional[bool],
        typer.Option("--live/--no-live", help="Print each result as it lands (default: for files up to 500 items)."),
    ] = None,
    by: Annotated[Optional[str], typer.Option(help=BY_HELP)] = None,
) -> None:
    """Score FILE embedded: SQLite and an in-process worker pool, no Redis or Postgres needed.

    The same tasks as the distributed setup. The judge runs when ANTHROPIC_API_KEY is set; without it
    the judge component is skipped and scores are marked partial (weights renormalised). Items may
    name a dataset registered with --dataset (e.g. --dataset storm=examples/datasets/storm). A suite
    file given by path (--suite path/to/suite.yaml) is registered in the SQLite store under its name;
    files it names (prompt_file, rubric_file) are read beside it.
    """
    from assay.scoring import slices
    from assay.scoring.errors import AssayError

    try:
        if by is not None:  # refused before any scoring, not after
            slices.metadata_key(by)
    except AssayError as exc:
        fail(f"--by: {exc.message}")
    suite_file = suite_path(suite)
    if suite_file is not None and not suite_file.is_file():
        fail(f"--suite {suite}: no such suite file")
    datasets: dict[str, Path] = {}
    for spec in dataset or []:
        name, _, path = spec.partition("=")
        if not name or not path:
            fail(f"--dataset takes NAME=PATH, got {spec!r}")
        if not Path(path).exists():
            fail(f"--dataset {name}: {path} does not exist")
        datasets[name] = Path(path)
    from assay.workers import embedded

    embedded.configure_environment(db)
    from assay.scoring.store.db import migrate
    from assay.settings import get_settings

    migrate()
    try:
        for name, content_hash in embedded.register_datasets(datasets).items():
            console.print(f"dataset {name}: {content_hash[:16]}…")
        batch_id = embedded.ingest_file(file, suite_file or suite, created_by=os.environ.get("USER", "cli"))
    except AssayError as exc:
        report_domain_error(exc)
        raise typer.Exit(2) from None
    console.print(f"batch [bold]{batch_id}[/bold] · {file} · suite {suite}")
    worker_log = db.with_suffix(".log")
    with progress_bar() as bar:
        task = bar.add_task("scoring", total=None, passed=0, failed=0, errored=0)

        def show(view: dict[str, Any]) -> None:
            p = view["progress"]
            bar.update(task, total=p["total"], completed=p["done"], passed=p["passed"], failed=p["failed"], errored=p["errored"])

        def problem(message: str) -> None:
            bar.console.print(f"[yellow]worker error:[/yellow] {escape(message)}", highlight=False)

        def sandbox_started(message: str) -> None:
            bar.console.print(escape(message), highlight=False)

        # SIGTERM unwinds like Ctrl-C, so the worker stops and the sandbox's work folder is removed.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            view = embedded.run_batch(
                batch_id,
                concurrency=concurrency,
                on_progress=show,
                on_finished=live_printer(bar, live, total=None),
                on_problem=problem,
                on_sandbox_start=sandbox_started,
                stall_seconds=get_settings().embedded_stall_seconds,
                log_file=worker_log,
            )
        except embedded.Stalled as exc:
            fail(f"batch {batch_id} stopped: {exc} (the worker's log: {worker_log})", code=1)
    target = out or file.with_name(file.name + ".results.jsonl")
    count = _write_embedded_results(batch_id, target)
    console.print(summary_table(view))
    if by is not None:
        _print_slices(batch_id, by)
    console.print(f"{count} results written to [bold]{target}[/bold]")


def _print_slices(batch_id: Any, by: str) -> None:
    """The batch's summary per slice, from the embedded store (a key holding objects: the reason)."""
    from assay.scoring.errors import AssayError
    from assay.scoring.pipeline.summaries import sliced_summary
    from assay.scoring.store.db import transaction

    try:
        with transaction() as session:
            console.print(sliced_summary_table(sliced_summary(session, batch_id, by)))
    except AssayError as exc:
        console.print(f"[yellow]no slices:[/yellow] {escape(exc.message)}")


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _write_embedded_results(batch_id: Any, target: Path) -> int:
    from assay.scoring.intake import batches as svc
    from assay.scoring.kinds import get_kind
    from assay.scoring.reports.views import live_lines, score_view
    from assay.scoring.store.db import new_session
    from assay.scoring.suites.criteria import load_criteria

    session = new_session()
    count = 0
    try:
        criteria = load_criteria(session, svc.get_batch(session, batch_id).criteria_hash)
        threshold, kind = criteria.threshold, get_kind(criteria.kind)
        with target.open("w") as handle:
            for score in svc.iter_results(session, batch_id, status="all"):
                view = score_view(score, threshold=threshold)
                view["live"] = live_lines(score, kind, threshold)
                handle.write(json.dumps(view) + "\n")
                count += 1
    finally:
        session.close()
    return count
