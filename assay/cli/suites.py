"""``assay suite``: check suite files, and register them through the API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from assay.cli.common import ApiKey, ApiUrl, api_client, console, out, print_json, request
from assay.cli.gating import AsJson
from assay.cli.stores import DEFAULT_DB, EmbeddedDb, OptionalApiUrl, open_store

suite_cli = typer.Typer(
    help="Check suite files, register them through the API, and list suites and their criteria versions.",
    no_args_is_help=True,
)


@suite_cli.command("validate")
def suite_validate(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A suite file (YAML or JSON).")],
    items: Annotated[
        Optional[Path],
        typer.Option(
            exists=True, dir_okay=False, readable=True,
            help="Sample items (JSONL or a JSON array): report, per line, what the upload would reject and "
            "which components would skip or fail.",
        ),
    ] = None,
) -> None:
    """Resolve a suite file as `assay run --suite FILE` would and report every problem at once, each
    with its component and field. Exit 1 on a problem, 0 when clean.

    Prints a JSON report on stdout (the resolved criteria, the criteria hash, the problems, the sample
    lines' findings) and the problems in words on stderr. Checks the weights add up to 1 and the judge
    prompts' {{...}} placeholders against the fields the suite's items have. Files the suite names
    (prompt_file, rubric_file) are read beside FILE, ${VAR} from the environment, the judge model
    through ASSAY_CONFIG_DIR's models.yaml. Says too whether the suite could be registered through the
    API as it is (`assay suite push`).
    """
    from assay.scoring.errors import CriteriaError
    from assay.scoring.suites.api_suites import parse_body
    from assay.scoring.suites.validation import validate_suite_file
    from assay.settings import get_settings

    config_dir = get_settings().config_dir
    report = validate_suite_file(file, config_dir, items=items)
    print_json(report.to_dict())
    for problem in report.problems:
        console.print(f"[red]problem:[/red] {escape(str(problem))}", highlight=False)
    for finding in report.findings:
        colour = "yellow" if finding.outcome == "skip" else "red"
        console.print(f"[{colour}]{escape(str(finding))}[/{colour}]", highlight=False)
    suite = report.suite
    if items is not None and suite is not None:
        bad_lines = len({f.line for f in report.findings})
        console.print(f"{report.items_checked} sample item(s) checked: {bad_lines} with a finding", highlight=False)
    if suite is None or report.problems:
        console.print(f"{len(report.problems)} problem(s) in {escape(str(file))}", highlight=False)
        raise typer.Exit(1)
    if report.valid:
        console.print(f"suite [bold]{escape(suite.name)}[/bold] ({suite.criteria.kind}) is valid")
    else:
        console.print(
            f"suite [bold]{escape(suite.name)}[/bold] ({suite.criteria.kind}) resolves, but sample lines would be "
            "rejected or fail (above)"
        )
    console.print(f"criteria hash {suite.criteria_hash}")
    try:
        parse_body(file.read_bytes(), "json" if file.suffix == ".json" else "yaml", config_dir)
    except CriteriaError as exc:
        console.print(f"not registrable through the API as it is: {escape(exc.message)}", highlight=False)
    else:
        console.print("registrable through the API as it is (assay suite push)")
    if not report.valid:
        raise typer.Exit(1)


@suite_cli.command("push")
def suite_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A suite file (YAML or JSON).")],
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """Register a suite file through the API (POST /api/v1/suites): a new suite, or the next version
    of an API suite of its name. A file suite's name is refused (files win)."""
    with api_client(api_url, api_key) as client:
        registered = push_file(client, file)
    print(registered["version"]["criteria_hash"])


def push_file(client: Any, file: Path) -> dict[str, Any]:
    """Register a suite file through the API (``suite push``, ``submit --suite FILE``) and say what it
    did; returns the API's answer."""
    content_type = "application/json" if file.suffix == ".json" else "application/yaml"
    out = request(client.post, "/api/v1/suites", content=file.read_bytes(), headers={"Content-Type": content_type})
    version, suite = out["version"], out["suite"]
    what = f"version {version['version']}" if out["created"] else f"unchanged (version {version['version']})"
    console.print(f"suite [bold]{escape(suite['name'])}[/bold]: {what} · criteria hash {version['criteria_hash']}")
    return out


@suite_cli.command("list")
def suite_list(
    as_json: AsJson = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """List the suites a store knows (file, API and run-by-path suites) with their current criteria
    hash and how many API versions they have. Reads the embedded store (--db), or the API with --api-url."""
    with open_store(db, api_url, api_key) as store:
        listed = store.suites()
    if as_json:
        print_json(listed)
        return
    table = Table(title=f"suites in {escape(api_url or str(db))}")
    for column in ("name", "kind", "origin", "state", "API versions", "current criteria hash"):
        table.add_column(column)
    for s in listed["suites"]:
        table.add_row(escape(s["name"]), s["kind"], s["origin"], s["state"], str(s["versions"]), s["current_criteria_hash"])
    out.print(table)


@suite_cli.command("show")
def suite_show(
    name: Annotated[str, typer.Argument(help="The suite's name.")],
    version: Annotated[
        Optional[int], typer.Option(min=1, help="Show this criteria version with its resolved criteria.")
    ] = None,
    as_json: AsJson = False,
    db: EmbeddedDb = DEFAULT_DB,
    api_url: OptionalApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Show a suite's criteria versions (number, criteria hash, since, batches, current), or with
    --version N that version's resolved criteria. An API suite's versions are those registered through
    the API; a file suite's the criteria hashes its batches were scored under, by first use. Reads the
    embedded store (--db), or the API with --api-url."""
    if version is not None:
        with open_store(db, api_url, api_key) as store:
            shown = store.criteria_version(name, version)
        if as_json:
            print_json(shown)
            return
        out.print(f"suite {escape(name)} · version {shown['version']} · criteria hash {shown['criteria_hash']}", highlight=False)
        out.print(f"since {shown['since']} · {shown['batches']} batch(es){' · current' if shown['current'] else ''}", highlight=False)
        out.print(json.dumps(shown["criteria"], indent=2, ensure_ascii=False), highlight=False, markup=False)
        return
    with open_store(db, api_url, api_key) as store:
        versions = store.criteria_versions(name)
    if as_json:
        print_json(versions)
        return
    table = Table(title=f"suite {escape(name)} ({versions['kind']}, {versions['origin']}): versions are {versions['numbered']}")
    for column in ("version", "criteria hash", "since", "batches", "current"):
        table.add_column(column)
    for v in versions["versions"]:
        table.add_row(str(v["version"]), v["criteria_hash"], str(v["since"] or "–"), str(v["batches"]), "yes" if v["current"] else "")
    out.print(table)
