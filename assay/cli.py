"""``assay``: run scoring embedded, talk to the API, and start the services."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

cli = typer.Typer(
    help="Assay: score LLM outputs with deterministic metrics and an LLM judge.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)

ApiUrl = Annotated[str, typer.Option(envvar="ASSAY_API_URL", help="Base URL of the Assay API.")]
ApiKey = Annotated[Optional[str], typer.Option(envvar="ASSAY_API_KEY", help="API key (bearer).")]


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _wait_for_database(role: str, *, migrated: bool = True, interval: float = 2.0, timeout: float | None = None) -> None:
    """Block until the store accepts connections (and, with ``migrated``, is at the migrations' head).

    A service started before Postgres is ready or before `assay migrate` ran (not every compose
    implementation honours depends_on conditions) waits here with a log line instead of crashing on a
    refused connection or a missing table. SQLite (embedded mode) has nothing to wait for.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    from assay.settings import get_settings

    url = get_settings().database_url
    if not url.startswith("postgresql"):
        return
    heads: set[str] = set()
    if migrated:
        from alembic.script import ScriptDirectory

        from assay.scoring.store.db import alembic_config

        heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
    started = time.monotonic()
    last_said = ("", 0.0)
    try:
        while True:
            try:
                with engine.connect() as conn:
                    if not migrated:
                        return
                    from alembic.runtime.migration import MigrationContext

                    current = set(MigrationContext.configure(conn).get_current_heads())
                if current == heads:
                    if last_said[0]:
                        console.print(f"{role}: the database is ready and migrated")
                    return
                reason = f"not migrated yet (at {', '.join(sorted(current)) or 'no revision'}, want {', '.join(sorted(heads))}; run `assay migrate`)"
            except SQLAlchemyError as exc:
                first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                reason = f"not reachable ({first[0] if first else type(exc).__name__})"
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                _fail(f"{role}: gave up waiting for the database after {waited:.0f}s: {reason}")
            # Say it when the reason changes, and every 30 s while it does not.
            if reason != last_said[0] or time.monotonic() - last_said[1] >= 30:
                console.print(f"{role}: waiting for the database: {reason}; retrying every {interval:g}s")
                last_said = (reason, time.monotonic())
            time.sleep(interval)
    finally:
        engine.dispose()


def _progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("pass {task.fields[passed]} · fail {task.fields[failed]} · errored {task.fields[errored]}"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


LIVE_AUTO_MAX_ITEMS = 500


def _live_printer(bar: Progress, live: bool | None, total: int | None):  # type: ignore[no-untyped-def]
    """Prints finished results' live lines above the progress bar (design 000's live results)."""
    state = {"shown": 0}

    def show(results: list[tuple[Any, list[str]]]) -> None:
        for label, lines in results:
            if live is False or (live is None and state["shown"] >= LIVE_AUTO_MAX_ITEMS):
                return
            state["shown"] += 1
            bar.console.print(f"[bold]{label}[/bold]")
            for line in lines:
                bar.console.print(f"  {line}", highlight=False, markup=False)

    return show


def _summary_table(view: dict[str, Any]) -> Table:
    progress = view.get("progress") or {}
    summary = view.get("summary") or {}
    table = Table(title=f"batch {view['batch_id']} · suite {view['suite']} · {view['status']}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key in ("total", "completed", "passed", "failed", "errored", "cancelled", "partial"):
        table.add_row(key, str(progress.get(key, "")))
    if summary.get("pass_rate") is not None:
        table.add_row("pass rate", f"{100 * summary['pass_rate']:.1f}%")
    if summary.get("mean_total") is not None:
        table.add_row("mean total", f"{summary['mean_total']:.3f}")
    for name, comp in (summary.get("components") or {}).items():
        mean = comp.get("mean")
        table.add_row(
            f"{name} mean / median",
            f"{mean:.3f} / {comp.get('median'):.3f}" if mean is not None else f"skipped {comp.get('skipped', 0)}",
        )
    table.add_row("cost (USD)", f"{summary.get('cost_usd', 0.0):.4f}")
    table.add_row("criteria hash", view["criteria_hash"][:16] + "…")
    return table


@cli.command()
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
) -> None:
    """Score FILE embedded: SQLite and an in-process worker pool, no Redis or Postgres needed.

    The same tasks as the distributed setup. The judge runs when ANTHROPIC_API_KEY is set; without it
    the judge component is skipped and scores are marked partial (weights renormalised). Items may
    name a dataset registered with --dataset (e.g. --dataset storm=examples/datasets/storm). A suite
    file given by path (--suite path/to/suite.yaml) is registered in the SQLite store under its name;
    files it names (prompt_file, rubric_file) are read beside it.
    """
    suite_file = _suite_path(suite)
    if suite_file is not None and not suite_file.is_file():
        _fail(f"--suite {suite}: no such suite file")
    datasets: dict[str, Path] = {}
    for spec in dataset or []:
        name, _, path = spec.partition("=")
        if not name or not path:
            _fail(f"--dataset takes NAME=PATH, got {spec!r}")
        if not Path(path).exists():
            _fail(f"--dataset {name}: {path} does not exist")
        datasets[name] = Path(path)
    from assay.workers import embedded

    embedded.configure_environment(db)
    from assay.scoring.errors import AssayError
    from assay.scoring.store.db import migrate
    from assay.settings import get_settings

    migrate()
    try:
        for name, content_hash in embedded.register_datasets(datasets).items():
            console.print(f"dataset {name}: {content_hash[:16]}…")
        batch_id = embedded.ingest_file(file, suite_file or suite, created_by=os.environ.get("USER", "cli"))
    except AssayError as exc:
        _report_domain_error(exc)
        raise typer.Exit(2) from None
    console.print(f"batch [bold]{batch_id}[/bold] · {file} · suite {suite}")
    worker_log = db.with_suffix(".log")
    with _progress_bar() as bar:
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
                on_finished=_live_printer(bar, live, total=None),
                on_problem=problem,
                on_sandbox_start=sandbox_started,
                stall_seconds=get_settings().embedded_stall_seconds,
                log_file=worker_log,
            )
        except embedded.Stalled as exc:
            _fail(f"batch {batch_id} stopped: {exc} (the worker's log: {worker_log})", code=1)
    target = out or file.with_name(file.name + ".results.jsonl")
    count = _write_embedded_results(batch_id, target)
    console.print(_summary_table(view))
    console.print(f"{count} results written to [bold]{target}[/bold]")


def _suite_path(suite: str) -> Path | None:
    """The suite file a --suite value names, or None for an installed suite's name."""
    return Path(suite) if "/" in suite or suite.endswith((".yaml", ".yml", ".json")) else None


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


def _report_domain_error(exc: Any) -> None:
    console.print(f"[red]error:[/red] {exc.message}")
    for bad in (exc.details or {}).get("bad_lines", [])[:20]:
        console.print(f"  line {bad['line']}: {bad['reason']}")


# --- API client commands --------------------------------------------------------------------------------


def _client(api_url: str, api_key: str | None):  # type: ignore[no-untyped-def]
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=api_url, headers=headers, timeout=httpx.Timeout(60.0, read=600.0))


def _check(response: Any) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            _fail(f"HTTP {response.status_code}: {response.text[:500]}")
        console.print(f"[red]error {response.status_code}:[/red] {body.get('message', body)}")
        for bad in (body.get("details") or {}).get("bad_lines", [])[:20]:
            console.print(f"  line {bad['line']}: {bad['reason']}")
        raise typer.Exit(1)
    return response.json() if response.content else None


def _request(fn: Any, *args: Any, **kwargs: Any) -> Any:
    import httpx

    try:
        return _check(fn(*args, **kwargs))
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the API: {exc}")


def _upload_with_progress(path: Path, chunk_bytes: int = 1 << 20):  # type: ignore[no-untyped-def]
    """The file's bytes, streamed, with a progress bar; then a spinner while the API commits."""
    from rich.progress import DownloadColumn, TransferSpeedColumn

    size = path.stat().st_size
    with Progress(
        TextColumn("[bold]uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task("upload", total=size)
        with path.open("rb") as handle:
            while chunk := handle.read(chunk_bytes):
                bar.update(task, advance=len(chunk))
                yield chunk
    console.print(f"uploaded {size / 1024**2:.1f} MiB; waiting for the API to validate and store it")


def _watch(client: Any, batch_id: str, live: bool | None = None) -> dict[str, Any]:
    with _progress_bar() as bar:
        task = bar.add_task("scoring", total=None, passed=0, failed=0, errored=0)
        printer = _live_printer(bar, live, total=None)
        seen_until = "1970-01-01T00:00:00Z"
        while True:
            view = _request(client.get, f"/api/v1/batches/{batch_id}")
            if live is not False:
                page = _request(
                    client.get,
                    f"/api/v1/batches/{batch_id}/results",
                    params={"status": "finished", "finished_after": seen_until, "limit": 500},
                )
                if page["results"]:
                    seen_until = page["results"][-1]["completed_at"]
                    printer([(r.get("external_id") or f"#{r['position']}", r["live"] or []) for r in page["results"]])
            p = view["progress"]
            bar.update(task, total=p["total"], completed=p["done"], passed=p["passed"], failed=p["failed"], errored=p["errored"])
            if view["status"] not in ("planning", "running"):
                return view
            time.sleep(1.0)


@cli.command()
def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    suite: Annotated[str, typer.Option("--suite", "-s")],
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
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Upload FILE to the API as a batch (streamed), print its id, optionally wait for it."""
    headers = {"Content-Type": "application/x-ndjson"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    with _client(api_url, api_key) as client:
        accepted = _request(
            client.post,
            "/api/v1/batches",
            params={"suite": suite, "partial": str(partial).lower(), **({"budget_usd": budget} if budget else {})},
            content=_upload_with_progress(file),
            headers=headers,
        )
        console.print(f"batch [bold]{accepted['batch_id']}[/bold]: {accepted['accepted']} items accepted, {accepted['rejected']} rejected")
        for bad in accepted.get("bad_lines", [])[:20]:
            console.print(f"  line {bad['line']}: {bad['reason']}")
        if accepted.get("estimate"):
            _print_estimate(accepted["estimate"], budget)
        print(accepted["batch_id"])
        if wait:
            console.print(_summary_table(_watch(client, accepted["batch_id"], live)))


def _print_estimate(estimate: dict[str, Any], budget: float | None) -> None:
    console.print(
        f"estimate: {estimate['items']} item(s), {estimate['judge_calls']} judge call(s), "
        f"~{estimate['input_tokens']:,} input + ~{estimate['output_tokens']:,} output tokens "
        f"({estimate['output_basis']}), ~${estimate['cost_usd']:.4f} on the {estimate['lane']} lane"
    )
    for note in estimate.get("notes", []):
        console.print(f"  {note}", highlight=False)
    if budget is not None and estimate["cost_usd"] > budget:
        console.print(f"[yellow]the estimate exceeds the ${budget:.4f} budget: judge calls will stop there[/yellow]")


@cli.command()
def rescore(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Suite to re-score under its current criteria.")],
    stale_only: Annotated[
        bool, typer.Option(help="Only items scored under older criteria (not never-scored ones).")
    ] = False,
    partial: Annotated[
        bool, typer.Option(help="Also items whose current score is partial (judge skipped for lack of a key).")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Only print the count and the estimated calls, tokens, dollars.")] = False,
    lane: Annotated[str, typer.Option(help="realtime, or batch (Message Batches API: half price, slower).")] = "realtime",
    budget: Annotated[Optional[float], typer.Option(min=0.000001, help="Judge spend limit in US dollars.")] = None,
    wait: Annotated[bool, typer.Option(help="Show progress until the run's batch finishes.")] = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Re-score a suite's stale (and never-scored) items under its current criteria, as the nightly
    run does; old scores are kept as history. Prints the run's batch id."""
    if lane not in ("realtime", "batch"):
        _fail(f"--lane must be realtime or batch, not {lane!r}")
    body = {"suite": suite, "stale_only": stale_only, "partial": partial, "dry_run": dry_run, "lane": lane, "budget_usd": budget}
    with _client(api_url, api_key) as client:
        out = _request(client.post, "/api/v1/rescore", json=body)
        console.print(f"suite {out['suite']} · criteria {out['criteria_hash'][:12]} · {out['selection']}")
        _print_estimate(out["estimate"], budget)
        if out["batch_id"] is None:
            console.print("dry run: nothing was created" if dry_run else "nothing to re-score")
            return
        console.print(f"re-scoring batch [bold]{out['batch_id']}[/bold]")
        print(out["batch_id"])
        if wait:
            console.print(_summary_table(_watch(client, out["batch_id"], live=False)))


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


@cli.command()
def calibrate(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Suite whose judge noise to measure (current criteria).")],
    sample: Annotated[int, typer.Option(min=1, max=1000, help="Stored items to judge (chosen by item id hash).")],
    repeats: Annotated[int, typer.Option(min=2, max=20, help="Times each item is judged.")],
    budget: Annotated[Optional[float], typer.Option(min=0.000001, help="Judge spend limit in US dollars.")] = None,
    lane: Annotated[str, typer.Option(help="realtime, or batch (Message Batches API: half price, slower).")] = "realtime",
    dry_run: Annotated[bool, typer.Option(help="Only print the sample size and the estimated calls, tokens, dollars.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait for the run to finish and print the noise it measured.")] = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Measure the judge's noise: judge SAMPLE stored items of a suite REPEATS times each under its
    current criteria (the same items every time: the smallest SHA-256 of suite and item id). When the
    run's batch finishes, the pooled within-item standard deviation σw of each judge component and of
    the total, and the share of items whose pass/fail flipped, are stored (`GET /api/v1/suites/{name}/noise`).
    Prints the run's id."""
    if lane not in ("realtime", "batch"):
        _fail(f"--lane must be realtime or batch, not {lane!r}")
    body = {"sample": sample, "repeats": repeats, "budget_usd": budget, "lane": lane, "dry_run": dry_run}
    with _client(api_url, api_key) as client:
        out = _request(client.post, f"/api/v1/suites/{suite}/calibrations", json=body)
        console.print(f"suite {out['suite']} · criteria {out['criteria_hash'][:12]} · {out['sample']} item(s) × {out['repeats']}")
        _print_estimate(out["estimate"], budget)
        run = out["calibration"]
        if run is None:
            console.print("dry run: nothing was created")
            return
        console.print(f"calibration run [bold]{run['id']}[/bold] (batch {run['batch_id']})")
        print(run["id"])
        if not wait:
            return
        while run["status"] == "running":
            time.sleep(1.0)
            run = _request(client.get, f"/api/v1/suites/{out['suite']}/calibrations/{run['id']}")
        if run["noise"] is None:
            _fail(f"calibration run {run['id']} ended {run['status']} (batch {run['batch_status']}) without a noise estimate", 1)
        console.print(_noise_table(run["noise"]))


@cli.command()
def noise(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Suite whose measured judge noise to show.")],
    criteria_hash: Annotated[Optional[str], typer.Option(help="Only this criteria hash (64 hex characters).")] = None,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """The judge's noise floor of each criteria hash of a suite (its latest calibration run)."""
    with _client(api_url, api_key) as client:
        out = _request(
            client.get, f"/api/v1/suites/{suite}/noise", params={"criteria_hash": criteria_hash} if criteria_hash else None
        )
    if not out["noise"]:
        console.print(out["note"])
        return
    for floor in out["noise"]:
        current = " (current)" if floor["criteria_hash"] == out["current_criteria_hash"] else ""
        console.print(_noise_table(floor), f"criteria {floor['criteria_hash']}{current}")


@cli.command()
def resume(
    batch_id: str,
    budget: Annotated[
        Optional[float], typer.Option(min=0.000001, help="New judge spend limit in US dollars (omit: no limit).")
    ] = None,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Resume a budget_exhausted batch under a new budget; what already landed is kept."""
    with _client(api_url, api_key) as client:
        view = _request(client.post, f"/api/v1/batches/{batch_id}/resume", json={"budget_usd": budget})
    console.print(_summary_table(view))


@cli.command()
def status(
    batch_id: str,
    watch: Annotated[bool, typer.Option(help="Follow progress until the batch finishes.")] = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Show a batch's progress and summary."""
    with _client(api_url, api_key) as client:
        view = _watch(client, batch_id) if watch else _request(client.get, f"/api/v1/batches/{batch_id}")
    console.print(_summary_table(view))


@cli.command()
def results(
    batch_id: str,
    format: Annotated[str, typer.Option(help="jsonl or csv")] = "jsonl",
    status: Annotated[str, typer.Option(help="all, passed, failed or errored")] = "all",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Export a batch's results (streamed)."""
    import httpx

    if format not in ("jsonl", "csv"):
        _fail("--format is jsonl or csv")
    sink = output.open("w", newline="") if output else sys.stdout  # CSV lines end in \r\n as sent
    try:
        with _client(api_url, api_key) as client:
            with client.stream("GET", f"/api/v1/batches/{batch_id}/results", params={"format": format, "status": status}) as response:
                if response.status_code >= 400:
                    response.read()
                    _check(response)
                for text in response.iter_text():
                    sink.write(text)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the API: {exc}")
    finally:
        if output:
            sink.close()


def _diff_summary_table(diff: dict[str, Any]) -> Table:
    s = diff["summary"]
    table = Table(title=f"criteria {diff['from_hash'][:12]}… → {diff['to_hash'][:12]}… · suite {diff['suite'] or 'any'}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("items compared", str(s["items_compared"]))
    table.add_row("only under from / only under to", f"{s['items_only_from']} / {s['items_only_to']}")
    table.add_row("mean total old → new", f"{_mean(s['mean_old_total'])} → {_mean(s['mean_new_total'])}")
    table.add_row("mean delta [95 % CI]", _difference_cell({**s, "mean_difference": s["mean_delta"]}))
    table.add_row("wins / ties / losses of to", f"{s['wins']} / {s['ties']} / {s['losses']}")
    table.add_row("pass→fail / fail→pass", f"{s['pass_to_fail']} / {s['fail_to_pass']} · McNemar p = {s['mcnemar_p_value']:.4g}")
    for c in s["components"]:
        table.add_row(f"{escape(c['component'])} shift (n={c['n']})", _difference_cell({**c, "mean_difference": c["mean_shift"]}))
    if s["item_noise_floor"] is not None:
        table.add_row("per-item noise floor", f"±{s['item_noise_floor']:.3f}")
    for side in ("from", "to"):
        if s[f"components_only_{side}"]:
            table.add_row(f"components only under {side}", ", ".join(s[f"components_only_{side}"]))
    table.add_row("cost of the run (USD)", f"{s['cost_usd']:.4f}")
    table.add_row("same items under from (USD)", f"{s['cost_usd_from']:.4f}")
    return table


def _changes_table(title: str, rows: list[dict[str, Any]], old: str, new: str) -> Table:
    """Items whose total changed (diff: ``old``/``new`` = old/new; compare: a/b), with flip and noise flag."""
    table = Table(title=title)
    table.add_column("item")
    for name in (old, new, "delta"):
        table.add_column(name, justify="right")
    table.add_column("flip")
    table.add_column("beyond noise")
    for r in rows:
        table.add_row(
            escape(r["external_id"] or r.get("item_id") or ""),  # user text, not markup
            f"{r[f'{old}_total']:.3f}", f"{r[f'{new}_total']:.3f}", f"{r['delta']:+.3f}", r["flip"] or "",
            _beyond(r["beyond_noise"]),
        )
    return table


@cli.command()
def diff(
    suite: Annotated[str, typer.Option("--suite", "-s", help="Compare this suite's scores only.")],
    from_hash: Annotated[str, typer.Option("--from", help="Old criteria hash, or a unique prefix (8+ hex characters).")],
    to_hash: Annotated[str, typer.Option("--to", help="New criteria hash, or a unique prefix (8+ hex characters).")],
    csv_file: Annotated[
        Optional[Path], typer.Option("--csv", dir_okay=False, help="Also write every compared item to this CSV file (streamed).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many items to list by |delta| and how many flips.")] = 10,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Compare the scores of two criteria hashes over the items scored under both.

    Counts the latest completed score per item and hash. Prints the items compared (and those scored
    under only one hash), mean totals and delta with its bootstrap 95 % interval, wins / ties / losses,
    pass→fail and fail→pass flips with McNemar's exact test, the mean shift of each component the two
    criteria share with its interval, the judge's noise floor beside each mean (or "no noise floor
    measured" without `assay calibrate` on both hashes) and the cost of the new run; then the items
    whose total moved most and the items that flipped.
    """
    params = {"suite": suite, "from": from_hash, "to": to_hash, "limit": limit}
    with _client(api_url, api_key) as client:
        moved = _request(client.get, "/api/v1/criteria/diff", params=params)
        flips = _request(client.get, "/api/v1/criteria/diff", params={**params, "flips_only": "true"})
        console.print(_diff_summary_table(moved))
        if moved["items"]:
            console.print(_changes_table(f"largest |delta| ({len(moved['items'])} of {moved['total']})", moved["items"], "old", "new"))
        if flips["items"]:
            console.print(_changes_table(f"flips ({len(flips['items'])} of {flips['total']})", flips["items"], "old", "new"))
        if csv_file is None:
            return
        _download_csv(client, "/api/v1/criteria/diff", params, csv_file)
    console.print(f"{moved['summary']['items_compared']} compared items written to [bold]{csv_file}[/bold]")


def _download_csv(client: Any, path: str, params: dict[str, Any], target: Path) -> None:
    """Stream ``path``'s CSV export (``format=csv``) into ``target``."""
    import httpx

    try:
        with client.stream("GET", path, params={**params, "format": "csv"}) as response:
            if response.status_code >= 400:
                response.read()
                _check(response)
            with target.open("w", newline="") as sink:
                for text in response.iter_text():
                    sink.write(text)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the API: {exc}")


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.3f}"


def _difference_cell(d: dict[str, Any]) -> str:
    """A mean difference with its 95 % interval and the noise floor beside it (compare and diff)."""
    text = _signed(d["mean_difference"])
    if d["ci_low"] is not None:
        text += f" [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
    elif d["interval_note"]:
        text += f" ({d['interval_note']})"
    if d.get("noise_floor") is not None:
        verdict = "beyond" if d["beyond_noise"] else "within"
        text += f" · noise floor ±{d['noise_floor']:.3f}: {verdict} the judge's noise"
    elif d.get("noise_note"):
        text += f" · {d['noise_note']}"
    return text


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
    table.add_row("mean total a → b", f"{_mean(total['mean_a'])} → {_mean(total['mean_b'])}")
    table.add_row("mean difference [95 % CI]", _difference_cell(total))
    table.add_row("wins / ties / losses of b", f"{report['wins']} / {report['ties']} / {report['losses']}")
    rate = report["pass_rate"]
    table.add_row("pass rate a → b", f"{_mean(rate['mean_a'])} → {_mean(rate['mean_b'])}")
    table.add_row("pass-rate difference [95 % CI]", _difference_cell(rate))
    m = report["mcnemar"]
    table.add_row("McNemar (pass→fail / fail→pass)", f"{m['pass_to_fail']} / {m['fail_to_pass']} · p = {m['p_value']:.4g}")
    for c in report["components"]:
        table.add_row(f"{escape(c['name'])} shift (n={c['n']})", _difference_cell(c))
    for side in ("a", "b"):
        if report[f"components_only_{side}"]:
            table.add_row(f"components only in {side}", escape(", ".join(report[f"components_only_{side}"])))
    if report["item_noise_floor"] is not None:
        table.add_row("per-item noise floor", f"±{report['item_noise_floor']:.3f}")
    return table


def _mean(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _beyond(flag: bool | None) -> str:
    """An item's change against the per-item noise floor: yes, no, or – (not measured)."""
    return "–" if flag is None else "yes" if flag else "no"


@cli.command()
def compare(
    batch_a: Annotated[str, typer.Argument(help="The baseline batch id.")],
    batch_b: Annotated[str, typer.Argument(help="The batch compared against it.")],
    csv_file: Annotated[
        Optional[Path], typer.Option("--csv", dir_okay=False, help="Also write every pair to this CSV file (streamed).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="How many moved and flipped items to list.")] = 10,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Compare BATCH_B against BATCH_A pair by pair (items matched by external id, each batch's own scores).

    Prints the pairs matched and left out (partial, failed, pending; items in one batch only), the mean
    difference of the total with its bootstrap 95 % interval, wins / ties / losses, the pass-rate
    difference with McNemar's exact test, each shared component's shift, and beside each mean difference
    the judge's noise floor (or "no noise floor measured" without `assay calibrate`); then the items that
    moved most and those that flipped. Warns when the batches have different criteria or suites.
    """
    params = {"a": batch_a, "b": batch_b}
    with _client(api_url, api_key) as client:
        report = _request(client.get, "/api/v1/compare", params=params)
        for warning in report["warnings"]:
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
        console.print(_compare_table(report))
        if report["moved_most"]:
            moved = report["moved_most"][:limit]
            console.print(_changes_table(f"moved most ({len(moved)} of {report['paired']})", moved, "a", "b"))
        if report["flipped"]:
            flipped = report["flipped"][:limit]
            flips = report["mcnemar"]["pass_to_fail"] + report["mcnemar"]["fail_to_pass"]
            console.print(_changes_table(f"flipped ({len(flipped)} of {flips})", flipped, "a", "b"))
        if csv_file is None:
            return
        _download_csv(client, "/api/v1/compare", params, csv_file)
    console.print(f"every pair written to [bold]{csv_file}[/bold]")


@cli.command()
def metrics(
    batch_id: str,
    out: Annotated[Path, typer.Option(help="Directory for metrics.json and metrics_summary.json.")] = Path("."),
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Download design 002's metrics.json and metrics_summary.json of a pandas_codegen batch."""
    out.mkdir(parents=True, exist_ok=True)
    with _client(api_url, api_key) as client:
        for name in ("metrics.json", "metrics_summary.json"):
            response = _request_raw(client, f"/api/v1/batches/{batch_id}/{name}")
            (out / name).write_bytes(response.content)
            console.print(f"wrote {out / name}")


def _request_raw(client: Any, path: str) -> Any:
    import httpx

    try:
        response = client.get(path)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the API: {exc}")
    _check(response)
    return response


@cli.command()
def cancel(batch_id: str, api_url: ApiUrl = "http://127.0.0.1:8000", api_key: ApiKey = None) -> None:
    """Cancel a batch: queued work is dropped, finished scores are kept."""
    with _client(api_url, api_key) as client:
        view = _request(client.post, f"/api/v1/batches/{batch_id}/cancel")
    console.print(f"batch {batch_id} is {view['status']}")


# --- suites -------------------------------------------------------------------------------------------

suite_cli = typer.Typer(help="Check suite files, and register them through the API.", no_args_is_help=True)
cli.add_typer(suite_cli, name="suite")


@suite_cli.command("validate")
def suite_validate(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A suite file (YAML or JSON).")],
) -> None:
    """Resolve a suite file as `assay run --suite FILE` would: print the resolved criteria (JSON, on
    stdout), its criteria hash, and every problem found. Exit 1 on a problem.

    Files the suite names (prompt_file, rubric_file) are read beside FILE, ${VAR} from the environment,
    the judge model through ASSAY_CONFIG_DIR's models.yaml. Says too whether the suite could be
    registered through the API as it is (`assay suite push`).
    """
    from assay.scoring.errors import CriteriaError
    from assay.scoring.suites.api_suites import parse_body
    from assay.scoring.suites.criteria import load_suite_file
    from assay.settings import get_settings

    config_dir = get_settings().config_dir
    try:
        suite = load_suite_file(file, config_dir)
    except CriteriaError as exc:
        console.print(f"[red]problem:[/red] {escape(exc.message)}", highlight=False)
        raise typer.Exit(1) from None
    print(
        json.dumps(
            {
                "name": suite.name,
                "criteria_hash": suite.criteria_hash,
                "criteria": json.loads(suite.criteria.canonical_json()),
                "options": suite.options.model_dump(mode="json"),
            },
            indent=2,
            ensure_ascii=False,
        )
    )
    console.print(f"suite [bold]{escape(suite.name)}[/bold] ({suite.criteria.kind}) is valid")
    console.print(f"criteria hash {suite.criteria_hash}")
    try:
        parse_body(file.read_bytes(), "json" if file.suffix == ".json" else "yaml", config_dir)
    except CriteriaError as exc:
        console.print(f"not registrable through the API as it is: {escape(exc.message)}", highlight=False)
    else:
        console.print("registrable through the API as it is (assay suite push)")


@suite_cli.command("push")
def suite_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A suite file (YAML or JSON).")],
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Register a suite file through the API (POST /api/v1/suites): a new suite, or the next version
    of an API suite of its name. A file suite's name is refused (files win)."""
    content_type = "application/json" if file.suffix == ".json" else "application/yaml"
    with _client(api_url, api_key) as client:
        out = _request(client.post, "/api/v1/suites", content=file.read_bytes(), headers={"Content-Type": content_type})
    version, suite = out["version"], out["suite"]
    what = f"version {version['version']}" if out["created"] else f"unchanged (version {version['version']})"
    console.print(f"suite [bold]{escape(suite['name'])}[/bold]: {what} · criteria hash {version['criteria_hash']}")
    print(version["criteria_hash"])


# --- services -----------------------------------------------------------------------------------------


@cli.command()
def migrate() -> None:
    """Apply the database migrations (ASSAY_DATABASE_URL)."""
    from assay.scoring.store.db import migrate as apply

    _wait_for_database("migrate", migrated=False)
    apply()
    console.print("database is at the latest revision")


@cli.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    workers: Annotated[int, typer.Option(min=1)] = 1,
) -> None:
    """Serve the API (uvicorn, its proxy headers off: the API judges the socket peer itself, trusting
    X-Forwarded-* only from ASSAY_TRUSTED_PROXIES)."""
    import uvicorn
    from pydantic import ValidationError

    from assay.settings import get_settings

    try:
        settings = get_settings()
    except ValidationError as exc:
        problems = "; ".join(f"ASSAY_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        _fail(f"the settings are not valid: {problems}")
    _wait_for_database("api")
    if not settings.api_keys and not settings.trusted_proxies:
        console.print("[yellow]warning:[/yellow] no ASSAY_API_KEYS and no ASSAY_TRUSTED_PROXIES: every request will get 401")
    elif not settings.api_keys and not (settings.session_secret and settings.session_secret.get_secret_value()):
        console.print(
            "[yellow]warning:[/yellow] no ASSAY_SESSION_SECRET (nor ASSAY_API_KEYS to derive one): the proxy's "
            "users get no CSRF token, and their changes are taken only with a same-origin Origin header"
        )
    # proxy_headers=False: uvicorn would otherwise rewrite the client address from X-Forwarded-For for
    # loopback connections, and a local process could then pass for a trusted proxy.
    uvicorn.run(
        "assay.api.app:create_app", factory=True, host=host, port=port, workers=workers, proxy_headers=False
    )


@cli.command()
def worker(
    queues: Annotated[str, typer.Option(help="Comma-separated: metrics, judge, control.")] = "metrics,judge,control",
    pool: Annotated[Optional[str], typer.Option(help="prefork or threads (default: threads when judge is the only queue)")] = None,
    concurrency: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="Task threads or processes. Default: for a threads pool ceil(ASSAY_JUDGE_CONCURRENCY / "
            "ASSAY_JUDGE_GROUP_SIZE) + 1 (their judge calls, at most ASSAY_JUDGE_CONCURRENCY in flight, run on the "
            "process's one judge event loop); else the CPU count.",
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option()] = "INFO",
    name: Annotated[
        Optional[str],
        typer.Option(
            help="Celery node name (NAME@HOST; %h is the host name). Default: the queues and this process's "
            "id, e.g. judge-4242@%h, so workers started side by side on one host are told apart (in Flower too).",
        ),
    ] = None,
    metrics_port: Annotated[
        Optional[int],
        typer.Option(
            envvar="ASSAY_WORKER_METRICS_PORT",
            min=1,
            max=65535,
            help="Serve this worker's Prometheus /metrics on this port (its pool processes added up), for a "
            "worker whose host or container shares no PROMETHEUS_MULTIPROC_DIR with the API.",
        ),
    ] = None,
) -> None:
    """Start a Celery worker on the given queues (task events on, for Flower)."""
    from assay.settings import get_settings, judge_task_threads

    _wait_for_database("worker")

    if metrics_port is not None:
        # Multiprocess mode must be on before prometheus_client is first imported: the pool's
        # processes count into files there, which the exporter in this process adds up.
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            import tempfile

            os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="assay-metrics-")
        from assay.observability import start_worker_exporter

        start_worker_exporter(metrics_port)
        console.print(f"worker metrics on http://0.0.0.0:{metrics_port}/metrics")

    names = [q.strip() for q in queues.split(",") if q.strip()]
    unknown = set(names) - {"metrics", "judge", "control"}
    if unknown:
        _fail(f"unknown queue(s): {', '.join(sorted(unknown))}")
    chosen_pool = pool or ("threads" if names == ["judge"] else "prefork")
    settings = get_settings()
    judge_threads = judge_task_threads(settings.judge_concurrency, settings.judge_group_size)
    threads = concurrency or (judge_threads if chosen_pool == "threads" else os.cpu_count() or 2)
    from assay.workers.app import app

    # Two workers with one node name (Celery's default is celery@HOST) are one worker to Flower and to
    # inspect/ping: Flower would list one of them and only its queues.
    node_name = name or f"{'-'.join(names)}-{os.getpid()}@%h"
    app.worker_main(
        ["worker", "-Q", ",".join(names), "-P", chosen_pool, "-c", str(threads), "-E", "-l", loglevel, "-n", node_name]
    )


@cli.command()
def beat(loglevel: Annotated[str, typer.Option()] = "INFO") -> None:
    """Start Celery beat (the reconciler's schedule)."""
    _wait_for_database("beat")
    from assay.workers.app import app

    Path(".assay").mkdir(exist_ok=True)
    app.start(["beat", "-l", loglevel, "--schedule", os.environ.get("ASSAY_BEAT_SCHEDULE_FILE", ".assay/celerybeat-schedule")])


@cli.command()
def flower(
    port: Annotated[Optional[int], typer.Option(help="Default: ASSAY_FLOWER_PORT (5555).")] = None,
    address: Annotated[
        Optional[str], typer.Option(help="Interface to listen on. Default: ASSAY_FLOWER_ADDRESS (127.0.0.1).")
    ] = None,
) -> None:
    """Start Flower with basic auth from ASSAY_FLOWER_USER / ASSAY_FLOWER_PASSWORD on every page, its API
    and its /metrics (/healthcheck stays open: it says only OK)."""
    from assay.settings import get_settings

    settings = get_settings()
    if settings.flower_password is None:
        _fail("set ASSAY_FLOWER_PASSWORD: Flower is never started without basic auth")
    from assay.workers.app import app
    from assay.workers.flower import require_login_for_metrics

    require_login_for_metrics()
    app.start(
        [
            "flower",
            f"--address={address if address is not None else settings.flower_address}",
            f"--port={port or settings.flower_port}",
            f"--basic-auth={settings.flower_user}:{settings.flower_password.get_secret_value()}",
        ]
    )


labels_cli = typer.Typer(help="Human labels, and how the judge agrees with them (through the API).", no_args_is_help=True)
cli.add_typer(labels_cli, name="labels")
LABEL_TYPES = {".csv": "text/csv", ".jsonl": "application/x-ndjson", ".ndjson": "application/x-ndjson"}


@labels_cli.command("push")
def labels_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A .csv or .jsonl file.")],
    suite: Annotated[str, typer.Option("--suite", "-s")],
    partial: Annotated[bool, typer.Option(help="Store the good rows when some are bad.")] = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Upload human labels (POST /api/v1/suites/{name}/labels): CSV or JSONL, by the file's extension.
    Rows: item_id (or batch_id and external_id), passed and/or score (0..1), annotator, comment."""
    content_type = LABEL_TYPES.get(file.suffix.lower())
    if content_type is None:
        _fail(f"{file.name}: name a .csv, .jsonl or .ndjson file (the extension decides the format)")
    with _client(api_url, api_key) as client:
        out = _request(
            client.post,
            f"/api/v1/suites/{suite}/labels",
            params={"partial": str(partial).lower()},
            content=file.read_bytes(),
            headers={"Content-Type": content_type},
        )
    console.print(
        f"suite {out['suite']}: {out['accepted']} label(s) stored ({out['created']} new, {out['replaced']} replaced)"
        + (f", {out['rejected']} bad row(s)" if out["rejected"] else "")
    )
    for bad in out["bad_lines"][:20]:
        console.print(f"  line {bad['line']}: {bad['reason']}")


def _ratio(value: float | None, reason: str | None = None) -> str:
    return f"{value:.3f}" if value is not None else f"- ({reason})" if reason else "-"


@labels_cli.command("agreement")
def labels_agreement(
    suite: Annotated[str, typer.Option("--suite", "-s")],
    criteria_hash: Annotated[Optional[str], typer.Option(help="Only this criteria hash (default: every labelled one).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON report.")] = False,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """How the suite's machine verdicts agree with its human labels, per criteria hash
    (GET /api/v1/suites/{name}/agreement): accuracy, Cohen's kappa, Spearman, confusion matrix,
    ties and the disagreeing items."""
    params = {"criteria_hash": criteria_hash} if criteria_hash else {}
    with _client(api_url, api_key) as client:
        report = _request(client.get, f"/api/v1/suites/{suite}/agreement", params=params)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
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
        for e in h["disagreeing"]["items"][:20]:
            machine = "pass" if e["machine_passed"] else "fail"
            people = "pass" if e["human_passed"] else "fail"
            typer.echo(f"  disagrees: {e['external_id'] or e['item_id']}  machine {machine} ({_ratio(e['machine_total'])}), people {people} ({e['human_pass_votes']}-{e['human_fail_votes']})")


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
