"""Batches through the API: ``submit``, ``resume``, ``status``, ``results``, ``metrics``, ``cancel``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from assay.cli.common import (
    BY_HELP,
    ApiKey,
    ApiUrl,
    api_client,
    console,
    exit_unless_finished,
    fail,
    out,
    print_estimate,
    print_json,
    request,
    request_raw,
    sliced_summary_table,
    suite_path,
    summary_table,
    upload_with_progress,
)
from assay.cli.common import watch as watch_batch
from assay.cli.gating import AsJson, FailUnder, Junit, finish_run
from assay.cli.stores import DEFAULT_DB, EmbeddedDb, OptionalApiUrl, open_store
from assay.cli.suites import push_file


def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    suite: Annotated[
        str,
        typer.Option(
            "--suite", "-s",
            help="A suite's name, or a suite file's path (a value with a / or ending in .yaml, .yml, .json): "
            "registered through the API first, as `assay suite push` does.",
        ),
    ],
    wait: Annotated[bool, typer.Option(help="Show progress until the batch finishes.")] = False,
    live: Annotated[
        Optional[bool], typer.Option("--live/--no-live", help="With --wait, print each result as it lands.")
    ] = None,
    partial: Annotated[bool, typer.Option(help="Accept the good lines when some are bad.")] = False,
    idempotency_key: Annotated[Optional[str], typer.Option(help="Makes a retried submit return the first batch.")] = None,
    budget: Annotated[
        Optional[float],
        typer.Option(
            min=0.000001,
            help="Judge spend limit in US dollars: judge calls stop when it is reached (the batch ends "
            "budget_exhausted; resume it with `assay resume`). The pre-flight estimate is printed.",
        ),
    ] = None,
    fail_under: FailUnder = None,
    junit: Junit = None,
    as_json: AsJson = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Upload FILE to the API as a batch (streamed), print its id, optionally wait for it.

    A suite file (--suite path/to/suite.yaml) is registered through the API first (a new suite, or the
    next version of an API suite of its name) and the batch is scored under it.

    With --wait: exit 3 when the batch did not finish, 1 under --fail-under; --junit lists every item."""
    if (fail_under is not None or junit is not None or as_json) and not wait:
        fail("--fail-under, --junit and --json report on the finished batch: add --wait")
    suite_file = suite_path(suite)
    if suite_file is not None and not suite_file.is_file():
        fail(f"--suite {suite}: no such suite file")
    headers = {"Content-Type": "application/x-ndjson"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    with api_client(api_url, api_key) as client:
        if suite_file is not None:
            suite = push_file(client, suite_file)["suite"]["name"]
        accepted = request(
            client.post,
            "/api/v1/batches",
            params={"suite": suite, "partial": str(partial).lower(), **({"budget_usd": budget} if budget else {})},
            content=upload_with_progress(file),
            headers=headers,
        )
        console.print(f"batch [bold]{accepted['batch_id']}[/bold]: {accepted['accepted']} items accepted, {accepted['rejected']} rejected")
        for bad in accepted.get("bad_lines", [])[:20]:
            console.print(f"  line {bad['line']}: {bad['reason']}")
        if accepted.get("estimate"):
            print_estimate(accepted["estimate"], budget)
        if not as_json:
            print(accepted["batch_id"], flush=True)  # first on stdout: scripts read the id from there
        if not wait:
            return
        view = watch_batch(client, accepted["batch_id"], live)
    if not as_json:
        out.print(summary_table(view))
    finish_run(
        view, accepted["batch_id"], fail_under=fail_under, baseline=None, options=None, junit=junit, as_json=as_json,
        db=Path(".assay/embedded.db"), api_url=api_url, api_key=api_key,
    )


def resume(
    batch_id: str,
    budget: Annotated[
        Optional[float], typer.Option(min=0.000001, help="New judge spend limit in US dollars (omit: no limit).")
    ] = None,
    as_json: AsJson = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Resume a budget_exhausted batch under a new budget; what already landed is kept."""
    with api_client(api_url, api_key) as client:
        view = request(client.post, f"/api/v1/batches/{batch_id}/resume", json={"budget_usd": budget})
    if as_json:
        print_json(view)
    else:
        out.print(summary_table(view))


def status(
    batch_id: str,
    watch: Annotated[bool, typer.Option(help="Follow progress until the batch finishes (exit 3 when it does not).")] = False,
    as_json: AsJson = False,
    by: Annotated[Optional[str], typer.Option(help=BY_HELP)] = None,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Show a batch's progress and summary (per slice of a metadata key with --by), from the embedded
    store (--db) or through the API (--api-url)."""
    with open_store(db, api_url, api_key) as store:
        view = store.watch(batch_id) if watch else store.batch(batch_id)
        sliced = store.slices(batch_id, by) if by is not None else None
    if as_json:
        print_json({**view, "slices": sliced} if sliced is not None else view)
    else:
        out.print(summary_table(view))
        if sliced is not None:
            out.print(sliced_summary_table(sliced))
    if watch:
        exit_unless_finished(view)


RESULT_FORMATS = ("jsonl", "csv", "xlsx")
RESULT_STATUSES = ("all", "finished", "passed", "failed", "errored")


def results(
    batch_id: str,
    format: Annotated[
        str, typer.Option(help="jsonl or csv (every result, streamed), or xlsx (the Excel report; needs --output).")
    ] = "jsonl",
    status: Annotated[str, typer.Option(help="all, passed, failed or errored (jsonl and csv)")] = "all",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Export a batch's results (streamed), each with the item's content (input, output, expected,
    context, metadata — metadata.KEY columns in CSV and Excel), from the embedded store (--db) or
    through the API (--api-url)."""
    if format not in RESULT_FORMATS:
        fail(f"--format is one of {', '.join(RESULT_FORMATS)}, not {format!r}")
    if format == "xlsx" and output is None:
        fail("--format xlsx writes a workbook: name the file with --output")
    if status not in RESULT_STATUSES:
        fail(f"--status is one of {', '.join(RESULT_STATUSES)}, not {status!r}")
    with open_store(db, api_url, api_key) as store:
        store.write_results(batch_id, format, status, output)


def metrics(
    batch_id: str,
    out: Annotated[Path, typer.Option(help="Directory for metrics.json and metrics_summary.json.")] = Path("."),
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Download the pandas code-generation design's metrics.json and metrics_summary.json of a pandas_codegen batch."""
    out.mkdir(parents=True, exist_ok=True)
    with api_client(api_url, api_key) as client:
        for name in ("metrics.json", "metrics_summary.json"):
            response = request_raw(client, f"/api/v1/batches/{batch_id}/{name}")
            (out / name).write_bytes(response.content)
            console.print(f"wrote {out / name}")


def cancel(
    batch_id: str, as_json: AsJson = False, api_url: ApiUrl = "http://127.0.0.1:8000", api_key: ApiKey = None
) -> None:
    """Cancel a batch: queued work is dropped, finished scores are kept. Prints its summary."""
    with api_client(api_url, api_key) as client:
        view = request(client.post, f"/api/v1/batches/{batch_id}/cancel")
    if as_json:
        print_json(view)
    else:
        out.print(summary_table(view))
