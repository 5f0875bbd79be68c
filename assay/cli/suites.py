"""``assay suite``: check suite files, and register them through the API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from assay.cli.common import ApiKey, ApiUrl, api_client, console, request

suite_cli = typer.Typer(help="Check suite files, and register them through the API.", no_args_is_help=True)


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
    with api_client(api_url, api_key) as client:
        out = request(client.post, "/api/v1/suites", content=file.read_bytes(), headers={"Content-Type": content_type})
    version, suite = out["version"], out["suite"]
    what = f"version {version['version']}" if out["created"] else f"unchanged (version {version['version']})"
    console.print(f"suite [bold]{escape(suite['name'])}[/bold]: {what} · criteria hash {version['criteria_hash']}")
    print(version["criteria_hash"])
