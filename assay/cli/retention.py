"""``assay prune``: apply the suites' retention policies to the store now, as the nightly run does."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from assay.cli.common import console, fail, out, print_json


def prune(
    suite: Annotated[Optional[str], typer.Option("--suite", "-s", help="Only this suite (default: every suite with a retention policy).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Only list the batches and scores that would be removed.")] = False,
    db: Annotated[
        Optional[Path], typer.Option(help="An embedded store (the SQLite file of `assay run`) instead of ASSAY_DATABASE_URL.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was (or would be) removed as JSON on stdout.")] = False,
) -> None:
    """Remove the score history the suites' `retention:` blocks let go: whole batches whose every item
    has a newer finished score, never a pending or running score, the latest one per item and kept
    criteria hash, a reviewed or queued one, or a calibration repeat. Prints what it removed (or,
    with --dry-run, would remove)."""
    if db is not None:
        if not db.is_file():
            fail(f"--db {db}: no such file")
        from assay.workers import embedded

        embedded.configure_environment(db)
        from assay.scoring.store.db import migrate

        migrate()  # a store written by an older `assay run` gains the retention columns
    # The features register the keep rules (reviews, calibration) that retention must honour.
    from assay.scoring import features  # noqa: F401
    from assay.scoring.store import retention
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import SuiteRecord
    from assay.settings import get_settings

    if suite is not None:
        with transaction() as session:
            if session.get(SuiteRecord, suite) is None:
                fail(f"--suite {suite}: no such suite in the store")
    plans = retention.prune(suite, dry_run=dry_run, chunk_size=get_settings().prune_chunk_size)
    if not plans:
        console.print(f"suite {suite} has no retention policy" if suite else "no suite has a retention policy")
        if as_json:
            print_json({"dry_run": dry_run, "batches": [], "scores": 0, "components": 0})
        return
    batches = [(plan.suite, batch) for plan in plans for batch in plan.batches]
    if dry_run:
        scores = sum(b.scores for _, b in batches)
        components = sum(b.components for _, b in batches)
    else:
        scores = sum(plan.removed_scores for plan in plans)
        components = sum(plan.removed_components for plan in plans)
    if as_json:
        print_json({
            "dry_run": dry_run,
            "batches": [
                {"suite": name, "batch_id": str(b.batch_id), "criteria_hash": b.criteria_hash,
                 "created_at": b.created_at.isoformat(), "scores": b.scores, "components": b.components}
                for name, b in batches
            ],
            "scores": scores,
            "components": components,
        })
        return
    table = Table(title="would be pruned (dry run)" if dry_run else "pruned")
    for column in ("suite", "batch", "criteria", "created", "scores", "components"):
        table.add_column(column, justify="right" if column in ("scores", "components") else "left")
    for name, batch in batches:
        table.add_row(
            name, str(batch.batch_id), batch.criteria_hash[:12], batch.created_at.strftime("%Y-%m-%d"),
            str(batch.scores), str(batch.components),
        )
    out.print(table)
    if dry_run:
        out.print(f"dry run: {len(batches)} batch(es), {scores} score(s), {components} component(s) would be removed", highlight=False)
    else:
        out.print(f"pruned {len(batches)} batch(es): {scores} score(s), {components} component(s) removed", highlight=False)
