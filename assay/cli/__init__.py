"""``assay``: run scoring embedded, talk to the API, and start the services.

One module per command group; this module is the command table, in the order ``assay --help`` lists
the commands."""

from __future__ import annotations

import typer

from assay.cli import (
    batches,
    dev,
    embedded,
    gating,
    jury,
    labels,
    pairwise,
    rescoring,
    retention,
    services,
    suites,
    trust,
)

cli = typer.Typer(
    help="Assay: score LLM outputs with deterministic metrics and an LLM judge.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for command in (
    embedded.run,
    batches.submit,
    rescoring.rescore,
    trust.calibrate,
    trust.noise,
    batches.resume,
    batches.status,
    batches.results,
    rescoring.diff,
    retention.prune,
    trust.compare,
    gating.gate,
    batches.metrics,
    batches.cancel,
):
    cli.command()(command)
cli.add_typer(pairwise.pairwise_cli, name="pairwise")
cli.add_typer(suites.suite_cli, name="suite")
for command in (services.migrate, services.api, services.worker, services.beat, services.flower):
    cli.command()(command)
cli.add_typer(labels.labels_cli, name="labels")
cli.add_typer(jury.jury_cli, name="jury")
cli.add_typer(dev.dev_cli, name="dev")


def main() -> None:
    cli()
