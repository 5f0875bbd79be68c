"""``assay jury``: how the members of a suite's juries agree with each other and with people (through
the API, or embedded with ``--db``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from assay.cli.common import ApiKey, ApiUrl, api_client, fail, request

jury_cli = typer.Typer(help="Juries of judges: how their members agree.", no_args_is_help=True)


def _number(value: float | None, reason: str | None = None) -> str:
    return f"{value:.3f}" if value is not None else f"- ({reason})" if reason else "-"


def _embedded(db: Path, suite: str, criteria_hash: str | None) -> dict[str, Any]:
    from assay.workers import embedded

    embedded.configure_environment(db)
    from assay.scoring.errors import AssayError
    from assay.scoring.store.db import migrate, transaction
    from assay.scoring.trust.jury_agreement import suite_jury_agreement

    if not db.is_file():
        fail(f"{db}: no such store (assay run --db writes one)")
    migrate()
    try:
        with transaction() as session:
            return suite_jury_agreement(session, suite, criteria_hash)
    except AssayError as exc:
        fail(exc.message)


def print_agreement(report: dict[str, Any]) -> None:
    typer.echo(f"suite {report['suite']}: {report['labelled_items']} labelled item(s)")
    if not report["hashes"]:
        typer.echo("no completed score of a jury yet")
    for h in report["hashes"]:
        current = " (current)" if h["criteria_hash"] == report["current_criteria_hash"] else ""
        typer.echo(f"\ncriteria {h['criteria_hash'][:12]}{current}")
        for name, c in h["components"].items():
            typer.echo(
                f"  jury {name}: {c['verdict']} verdict, {c['aggregate']}, {c['items']} item(s); "
                f"Krippendorff's alpha ({c['level']}) {_number(c['alpha'], c['alpha_reason'])}"
            )
            for member, m in c["members"].items():
                people = (c.get("with_people") or {}).get(f"{name}@{member}")
                agrees = f"  with people: kappa {_number(people['kappa'], people['kappa_reason'])}, accuracy {_number(people['accuracy'])}" if people else ""
                typer.echo(f"    member {member} ({m['provider']} {m['model']}, weight {m['weight']:g}): answered {m['answered']}{agrees}")
            for p in c["pairs"]:
                measure = (
                    f"kappa {_number(p['kappa'])}" if "kappa" in p
                    else f"alpha {_number(p['alpha'])}, mean |difference| {_number(p['mean_abs_difference'])}"
                )
                typer.echo(f"    pair {p['a']} / {p['b']}: {p['items']} item(s), equal {_number(p['equal'])}, {measure}")


@jury_cli.command("agreement")
def jury_agreement(
    suite: Annotated[str, typer.Option("--suite", "-s")],
    criteria_hash: Annotated[Optional[str], typer.Option(help="Only this criteria hash (default: every one with a jury).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report.")] = False,
    db: Annotated[Optional[Path], typer.Option(help="Read this SQLite store (assay run's --db) instead of the API.")] = None,
    api_url: ApiUrl = "http://127.0.0.1:8000",
    api_key: ApiKey = None,
) -> None:
    """How the members of the suite's juries agree, per jury component and criteria hash
    (GET /api/v1/suites/{name}/jury-agreement): Krippendorff's alpha at the verdict's level, each
    pair's kappa (or interval alpha), and each member's agreement with human labels."""
    if db is not None:
        report = _embedded(db, suite, criteria_hash)
    else:
        params = {"criteria_hash": criteria_hash} if criteria_hash else {}
        with api_client(api_url, api_key) as client:
            report = request(client.get, f"/api/v1/suites/{suite}/jury-agreement", params=params)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    print_agreement(report)
