"""What every command shares: the two consoles, the exit codes, the API client and its errors, progress
bars, summary tables.

Tables, summaries and ``--json`` documents go to stdout (``out``), so they can be piped and kept;
progress bars, logs, warnings and errors go to stderr (``console``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)
out = Console(soft_wrap=True)

# The exit codes, the same for every command (docs/reference/cli.md); 0 is done, or passed.
EXIT_GATE_FAILED = 1  # a regression, a pass rate under --fail-under (suite validate: a problem)
EXIT_USAGE = 2  # a mistake in the command or its input: bad options, a missing batch, bad lines
EXIT_INCOMPLETE = 3  # a batch that did not finish (cancelled, failed, out of budget; the embedded stall)
EXIT_API = 4  # the API unreachable, failing, or refusing the key


ApiUrl = Annotated[str, typer.Option(envvar="ASSAY_API_URL", help="Base URL of the Assay API.")]


ApiKey = Annotated[Optional[str], typer.Option(envvar="ASSAY_API_KEY", help="API key (bearer).")]


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def print_json(document: Any) -> None:
    """A ``--json`` document on stdout."""
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


def exit_unless_finished(view: dict[str, Any]) -> None:
    """Exit 3 when a batch that was waited for ended without finishing."""
    if view["status"] != "completed":
        fail(f"batch {view['batch_id']} ended {view['status']}: it did not finish", EXIT_INCOMPLETE)


def progress_bar() -> Progress:
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


def live_printer(bar: Progress, live: bool | None, total: int | None):  # type: ignore[no-untyped-def]
    """Prints finished results' live lines above the progress bar (the KQL scoring design's live results)."""
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


def summary_table(view: dict[str, Any]) -> Table:
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


def suite_path(suite: str) -> Path | None:
    """The suite file a --suite value names, or None for an installed suite's name."""
    return Path(suite) if "/" in suite or suite.endswith((".yaml", ".yml", ".json")) else None


def report_domain_error(exc: Any) -> None:
    console.print(f"[red]error:[/red] {exc.message}")
    for bad in (exc.details or {}).get("bad_lines", [])[:20]:
        console.print(f"  line {bad['line']}: {bad['reason']}")


def api_client(api_url: str, api_key: str | None):  # type: ignore[no-untyped-def]
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=api_url, headers=headers, timeout=httpx.Timeout(60.0, read=600.0))


# The API speaks of its query parameters; a CLI user needs the option that sets them.
_CLI_WORDING = (("partial=true", "--partial"),)


def check(response: Any) -> Any:
    """The response's JSON; an HTTP error is reported and exits: 4 when the key is refused or the
    server fails (5xx), 2 for a mistake in the request (a missing batch, bad lines)."""
    if response.status_code < 400:
        return response.json() if response.content else None
    try:
        body = response.json()
    except ValueError:
        body = {"message": response.text[:500]}
    message = str(body.get("message", body)) if isinstance(body, dict) else str(body)
    for api_words, cli_words in _CLI_WORDING:
        message = message.replace(api_words, cli_words)
    console.print(f"[red]error {response.status_code}:[/red] {escape(message)}", highlight=False)
    for bad in ((body.get("details") or {}) if isinstance(body, dict) else {}).get("bad_lines", [])[:20]:
        console.print(f"  line {bad['line']}: {escape(str(bad['reason']))}", highlight=False)
    if response.status_code in (401, 403):
        console.print("the API refused the key: set ASSAY_API_KEY or pass --api-key with a key the API accepts")
        raise typer.Exit(EXIT_API)
    raise typer.Exit(EXIT_API if response.status_code >= 500 else EXIT_USAGE)


def unreachable(exc: Exception) -> NoReturn:
    fail(f"cannot reach the API: {exc} (is it running? set ASSAY_API_URL or pass --api-url)", EXIT_API)


def request(fn: Any, *args: Any, **kwargs: Any) -> Any:
    import httpx

    try:
        return check(fn(*args, **kwargs))
    except httpx.HTTPError as exc:
        unreachable(exc)


def upload_with_progress(path: Path, chunk_bytes: int = 1 << 20):  # type: ignore[no-untyped-def]
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


def watch(client: Any, batch_id: str, live: bool | None = None) -> dict[str, Any]:
    """Follow a batch through the API until it ends, with each result's live lines as it lands."""

    def finished_since(since: str) -> list[dict[str, Any]]:
        params = {"status": "finished", "finished_after": since, "limit": 500}
        return request(client.get, f"/api/v1/batches/{batch_id}/results", params=params)["results"]

    return follow(lambda: request(client.get, f"/api/v1/batches/{batch_id}"), finished_since, live)


def follow(
    view_of: Any, finished_since: Any = None, live: bool | None = None, poll_seconds: float = 1.0
) -> dict[str, Any]:
    """A progress bar on stderr over ``view_of()`` (a batch's view) until the batch ends; its last view.
    ``finished_since(time)``: the results finished after that time, whose live lines are printed."""
    with progress_bar() as bar:
        task = bar.add_task("scoring", total=None, passed=0, failed=0, errored=0)
        printer = live_printer(bar, live, total=None)
        seen_until = "1970-01-01T00:00:00Z"
        while True:
            view = view_of()
            if live is not False and finished_since is not None:
                rows = finished_since(seen_until)
                if rows:
                    seen_until = rows[-1]["completed_at"]
                    printer([(r.get("external_id") or f"#{r['position']}", r["live"] or []) for r in rows])
            p = view["progress"]
            bar.update(task, total=p["total"], completed=p["done"], passed=p["passed"], failed=p["failed"], errored=p["errored"])
            if view["status"] not in ("planning", "running"):
                return view
            time.sleep(poll_seconds)


def print_estimate(estimate: dict[str, Any], budget: float | None) -> None:
    console.print(
        f"estimate: {estimate['items']} item(s), {estimate['judge_calls']} judge call(s), "
        f"~{estimate['input_tokens']:,} input + ~{estimate['output_tokens']:,} output tokens "
        f"({estimate['output_basis']}), ~${estimate['cost_usd']:.4f} on the {estimate['lane']} lane"
    )
    providers = estimate.get("by_provider") or []
    if len(providers) > 1:  # a suite judging with several providers: what each is paid
        for part in providers:
            console.print(
                f"  {part['provider']}: {part['judge_calls']} judge call(s), ~{part['input_tokens']:,} input + "
                f"~{part['output_tokens']:,} output tokens, ~${part['cost_usd']:.4f}",
                highlight=False,
            )
    for note in estimate.get("notes", []):
        console.print(f"  {note}", highlight=False)
    if budget is not None and estimate["cost_usd"] > budget:
        console.print(f"[yellow]the estimate exceeds the ${budget:.4f} budget: judge calls will stop there[/yellow]")


def started(
    answer: dict[str, Any], budget: float | None, created_id: str | None, *, created: str, nothing: str, as_json: bool, wait: bool
) -> bool:
    """After a request that starts a run (or only estimates one): print its estimate, then what was
    created (``created``) with its id first on stdout, where scripts read it, or why nothing was
    (``nothing``). Returns whether to wait for the run; when not, ``--json`` prints the answer here."""
    print_estimate(answer["estimate"], budget)
    if created_id is None:
        console.print(nothing)
    else:
        console.print(created)
        if not as_json:
            print(created_id, flush=True)
        if wait:
            return True
    if as_json:
        print_json(answer)
    return False


def download_csv(client: Any, path: str, params: dict[str, Any], target: Path) -> None:
    """Stream ``path``'s CSV export (``format=csv``) into ``target``."""
    import httpx

    try:
        with client.stream("GET", path, params={**params, "format": "csv"}) as response:
            if response.status_code >= 400:
                response.read()
                check(response)
            with target.open("w", newline="") as sink:
                for text in response.iter_text():
                    sink.write(text)
    except httpx.HTTPError as exc:
        unreachable(exc)


def request_raw(client: Any, path: str) -> Any:
    import httpx

    try:
        response = client.get(path)
    except httpx.HTTPError as exc:
        unreachable(exc)
    check(response)
    return response


def changes_table(title: str, rows: list[dict[str, Any]], old: str, new: str) -> Table:
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
            beyond_cell(r["beyond_noise"]),
        )
    return table


def beyond_cell(flag: bool | None) -> str:
    """An item's change against the per-item noise floor: yes, no, or – (not measured)."""
    return "–" if flag is None else "yes" if flag else "no"


def mean_cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def difference_cell(d: dict[str, Any]) -> str:
    """A mean difference with its 95 % interval and the noise floor beside it (compare and diff)."""
    text = signed(d["mean_difference"])
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


def signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.3f}"


def slice_text(s: dict[str, Any]) -> str:
    """A slice's name: its metadata value, "(no value)" or "(other)"."""
    return {"missing": "(no value)", "other": "(other)"}.get(s["kind"], s["value"])


def slice_name(s: dict[str, Any]) -> str:
    """A slice's name in a rich table, flagged when it is small."""
    return escape(slice_text(s)) + (" [yellow]small[/yellow]" if s["small"] else "")


BY_HELP = "Also report each slice by a metadata key: metadata.KEY (slices under the minimum size are flagged small)."


def sliced_summary_table(sliced: dict[str, Any]) -> Table:
    """A batch's summary per slice (GET /api/v1/batches/{id}/slices, or the embedded store's)."""
    table = Table(title=f"by {escape(sliced['by'])} (small: fewer than {sliced['min_items']} scored items)")
    for column in ("slice", "items", "scored", "passed", "errored", "pass rate", "mean total"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    names = sorted({name for s in sliced["slices"] for name in s["components"]})
    for name in names:
        table.add_column(f"{escape(name)} mean", justify="right")
    for s in sliced["slices"]:
        c = s["counts"]
        rate = "–" if s["pass_rate"] is None else f"{100 * s['pass_rate']:.1f}%"
        means = [mean_cell((s["components"].get(name) or {}).get("mean")) for name in names]
        table.add_row(
            slice_name(s), str(s["items"]), str(c["completed"]), str(c["passed"]), str(c["errored"]), rate,
            mean_cell(s["mean_total"]), *means,
        )
    notes = [f"{slice_name(s)}: {s['note']}" for s in sliced["slices"] if s["kind"] == "other"]
    table.caption = "; ".join(notes) or None
    return table
