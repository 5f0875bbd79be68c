"""``assay run``: score a file embedded (SQLite and an in-process worker pool, no services)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from assay.cli.common import (
    EXIT_USAGE,
    console,
    fail,
    report_domain_error,
    sliced_summary_table,
    suite_path,
    summary_table,
)
from assay.cli.common import out as stdout  # `run` has an `out` option
from assay.cli.gating import Alpha, AsJson, By, FailUnder, Junit, MaxDrop, MinPairs, finish_run
from assay.cli.stores import score_batch


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
    fail_under: FailUnder = None,
    baseline: Annotated[
        Optional[Path],
        typer.Option(dir_okay=False, exists=True, help="Gate the run against this results file (as `assay gate` does): exit 1 on a regression."),
    ] = None,
    max_drop: MaxDrop = 0.0,
    alpha: Alpha = 0.05,
    min_pairs: MinPairs = 10,
    by: By = None,
    junit: Junit = None,
    as_json: AsJson = False,
) -> None:
    """Score FILE embedded: SQLite and an in-process worker pool, no Redis or Postgres needed.

    The same tasks as the distributed setup. The judge runs when ANTHROPIC_API_KEY is set; without it
    the judge component is skipped and scores are marked partial (weights renormalised). Items may
    name a dataset registered with --dataset (e.g. --dataset storm=examples/datasets/storm). A suite
    file given by path (--suite path/to/suite.yaml) is registered in the SQLite store under its name;
    files it names (prompt_file, rubric_file) are read beside it.

    In CI: --fail-under RATE exits 1 under a pass rate; --baseline FILE gates the run against a results
    file kept from the main branch (exit 1 on a regression); --junit FILE lists every item as a test.
    """
    from assay.scoring import slices
    from assay.scoring.errors import AssayError

    try:
        if by is not None:  # refused before any scoring, not after
            slices.metadata_key(by)
    except AssayError as exc:
        fail(f"--by: {exc.message}")

    from assay.cli.gating import gate_options
    from assay.cli.stores import sources

    options = gate_options(max_drop, alpha, min_pairs, by) if baseline is not None else None
    if baseline is not None:
        with sources(db, None, None) as opened:
            opened.side(str(baseline), by)  # a file that is no results file stops the run before it scores
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

    migrate()
    try:
        for name, content_hash in embedded.register_datasets(datasets).items():
            console.print(f"dataset {name}: {content_hash[:16]}…")
        batch_id = embedded.ingest_file(file, suite_file or suite, created_by=os.environ.get("USER", "cli"))
    except AssayError as exc:
        report_domain_error(exc)
        raise typer.Exit(EXIT_USAGE) from None
    console.print(f"batch [bold]{batch_id}[/bold] · {file} · suite {suite}")
    view = score_batch(batch_id, db, concurrency=concurrency, live=live)
    target = out or file.with_name(file.name + ".results.jsonl")
    count = _write_embedded_results(batch_id, target)
    console.print(f"{count} results written to [bold]{target}[/bold]")
    if not as_json:
        stdout.print(summary_table(view))
        if by is not None:
            _print_slices(batch_id, by)
    finish_run(
        view, str(target), fail_under=fail_under, baseline=baseline, options=options, junit=junit, as_json=as_json, db=db,
    )


def _print_slices(batch_id: Any, by: str) -> None:
    """The batch's summary per slice, from the embedded store (a key holding objects: the reason)."""
    from assay.scoring.errors import AssayError
    from assay.scoring.pipeline.summaries import sliced_summary
    from assay.scoring.store.db import transaction

    try:
        with transaction() as session:
            stdout.print(sliced_summary_table(sliced_summary(session, batch_id, by)))
    except AssayError as exc:
        console.print(f"[yellow]no slices:[/yellow] {escape(exc.message)}")


def _write_embedded_results(batch_id: Any, target: Path) -> int:
    from assay.scoring.intake import batches as svc
    from assay.scoring.kinds import get_kind
    from assay.scoring.reports.views import export_view, live_lines
    from assay.scoring.store.db import new_session
    from assay.scoring.suites.criteria import load_criteria

    session = new_session()
    count = 0
    try:
        criteria = load_criteria(session, svc.get_batch(session, batch_id).criteria_hash)
        threshold, kind = criteria.threshold, get_kind(criteria.kind)
        with target.open("w") as handle:
            for score in svc.iter_results(session, batch_id, status="all"):
                view = export_view(score, threshold=threshold)
                view["live"] = live_lines(score, kind, threshold)
                handle.write(json.dumps(view) + "\n")
                count += 1
    finally:
        session.close()
    return count
