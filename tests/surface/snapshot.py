"""What a user sees of Assay, read the same way by the test and by the writer of the snapshot: the
OpenAPI document, every command's ``--help`` and the criteria hash of every shipped and example suite.

Moving modules must change none of it (FastAPI names its schemas after classes, so a move can rename
them). A change that means to alter the surface writes the snapshot again, on purpose, and the diff
shows what changed: ``python -m tests.surface.snapshot``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_DIR = Path(__file__).resolve().parent / "snapshots"
HELP_WIDTH = "100"


def openapi_document() -> dict[str, Any]:
    from assay.api.app import create_app

    return create_app().openapi()


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    if hasattr(group, "commands"):  # a group (Typer carries its own copy of click's classes)
        for name in sorted(group.commands):
            found.extend(_commands(group.commands[name], (*path, name)))
    return found


def help_texts() -> dict[str, str]:
    """``assay [group] [command] --help`` for every command, rendered at a fixed width and without colour."""
    import typer.main
    from typer.testing import CliRunner

    from assay.cli import cli

    runner = CliRunner()
    env = {"COLUMNS": HELP_WIDTH, "TERMINAL_WIDTH": HELP_WIDTH, "NO_COLOR": "1", "TERM": "dumb"}
    texts = {}
    for path in _commands(typer.main.get_command(cli)):
        result = runner.invoke(cli, [*path, "--help"], env=env, prog_name="assay")
        assert result.exit_code == 0, (path, result.output)
        texts[" ".join(("assay", *path))] = result.output
    return texts


def suite_files() -> dict[str, Path]:
    """Every suite Assay ships or documents: config/suites, the generic examples and the plug-in's."""
    files = {f"config/suites/{p.name}": p for p in sorted((REPO / "config" / "suites").glob("*.yaml"))}
    for folder in ("examples/generic", "examples/plugin"):
        for path in sorted((REPO / folder).glob("*.yaml")):
            files[f"{folder}/{path.name}"] = path
    return files


def criteria_hashes() -> dict[str, str]:
    from assay.scoring.suites.loader import parse_suite

    hashes = {}
    for name, path in suite_files().items():
        origin = "file" if name.startswith("config/") else "path"
        suite = parse_suite(path.read_text(), config_dir=REPO / "config", env={}, source=str(path), origin=origin)
        hashes[name] = suite.criteria_hash
    return hashes


SURFACES = {
    "openapi.json": openapi_document,
    "help.json": help_texts,
    "criteria_hashes.json": criteria_hashes,
}


def render(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    os.environ.setdefault("ASSAY_CONFIG_DIR", str(REPO / "config"))
    SNAPSHOT_DIR.mkdir(exist_ok=True)
    for name, read in SURFACES.items():
        (SNAPSHOT_DIR / name).write_text(render(read()))
        print(f"wrote {SNAPSHOT_DIR / name}")


if __name__ == "__main__":
    main()
