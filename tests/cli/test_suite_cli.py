"""``assay suite validate``, ``assay suite push`` and ``assay run --suite path/to/suite.yaml`` as a user
runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import API_KEY, REPO
from tests.dashboard.support import api_process

ITEMS = REPO / "examples" / "kql_items.jsonl"


def plain_env(**extra: str) -> dict[str, str]:
    """A user's shell: no test settings, no judge key; the shipped config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))}
    return env | {"PYTHONPATH": str(REPO), "COLUMNS": "200", "ASSAY_CONFIG_DIR": str(REPO / "config"), **extra}


def assay(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "assay.cli", *args],
        env=env or plain_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_suite(folder: Path, **changes: Any) -> Path:
    """A kql suite of the user's own, not installed: a prompt file beside it, a ${VAR} with a default."""
    shipped = yaml.safe_load((REPO / "config" / "suites" / "kql.yaml").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "grading.md").write_text((REPO / "config" / "prompts" / "kql_grading.md").read_text())
    suite = {
        "name": "my_kql",
        "kind": "kql",
        "description": "a suite of my own",
        "threshold": "${MY_THRESHOLD:-0.6}",
        "components": {
            "schema_match": {**shipped["components"]["schema_match"], "weight": 0.5},
            "semantic_similarity": {**shipped["components"]["semantic_similarity"], "weight": 0.3},
            "llm_grading": {"weight": 0.2, "judge": True},
        },
        "judge": {"max_tokens": 512, "verdict": "kql_grade", "prompt_file": "grading.md"},
        **changes,
    }
    path = folder / "my_kql.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def test_validate_prints_the_resolved_criteria_and_hash(tmp_path):
    path = write_suite(tmp_path / "mine")
    result = assay("suite", "validate", str(path), env=plain_env(MY_THRESHOLD="0.75"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["name"] == "my_kql" and out["criteria"]["threshold"] == 0.75
    assert out["criteria"]["judge"]["prompt"] == (REPO / "config" / "prompts" / "kql_grading.md").read_text()
    assert out["criteria"]["judge"]["model"]  # the provider's default model, resolved
    assert out["options"]["description"] == "a suite of my own"
    assert f"criteria hash {out['criteria_hash']}" in result.stderr
    # ${VAR} and prompt_file are fine in a file, but the API would refuse them: the user is told.
    assert "not registrable through the API as it is" in result.stderr and "${VAR}" in result.stderr
    # The hash is what the criteria say: another threshold, another hash.
    other = json.loads(assay("suite", "validate", str(path), cwd=tmp_path).stdout)
    assert other["criteria"]["threshold"] == 0.6 and other["criteria_hash"] != out["criteria_hash"]


def test_validate_of_an_installed_suite_gives_its_pinned_hash():
    result = assay("suite", "validate", "config/suites/kql.yaml")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["criteria_hash"] == "9ca804870e478f9342b96f017713e63fb0dbe30536bf0433447128defa152c61"


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"threshold": 1.5}, "threshold"),
        ({"judge": {"max_tokens": 512, "verdict": "kql_grade", "prompt_file": "missing.md"}}, "missing.md"),
        ({"components": {"schema_match": {"weight": 1.0, "metric": "no.such.metric", "version": 1}}}, "no.such.metric"),
        ({"threshold": "${MY_UNSET_VARIABLE}"}, "MY_UNSET_VARIABLE"),
    ],
    ids=["threshold", "prompt-file", "metric", "unset-variable"],
)
def test_validate_names_the_problem_and_exits_1(tmp_path, changes, problem):
    path = write_suite(tmp_path / "mine", **changes)
    result = assay("suite", "validate", str(path), cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "problem:" in result.stderr and problem in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_validate_of_a_file_that_is_not_a_suite_exits_1(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("- just\n- a list\n")
    result = assay("suite", "validate", str(path), cwd=tmp_path)
    assert result.returncode == 1 and "mapping" in result.stderr


def test_run_scores_with_a_suite_file_given_by_path(tmp_path):
    path = write_suite(tmp_path / "suites here")  # a folder name with a space
    validated = json.loads(assay("suite", "validate", str(path), cwd=tmp_path).stdout)
    db = tmp_path / "e.db"
    result = assay("run", str(ITEMS), "--suite", str(path), "--db", str(db), "--out", str(tmp_path / "r.jsonl"), "--no-live", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(results) == len(ITEMS.read_text().splitlines())
    assert {(r["suite"], r["criteria_hash"], r["status"]) for r in results} == {("my_kql", validated["criteria_hash"], "completed")}
    # No judge key: the judge component is skipped, its weight spread over the others.
    assert all(r["components"]["llm_grading"]["status"] == "skipped" and r["partial"] for r in results)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT origin, current_criteria_hash FROM suites WHERE name = 'my_kql'").fetchall() == [
            ("path", validated["criteria_hash"])
        ]


def test_run_with_a_missing_or_invalid_suite_file_is_a_clear_error(tmp_path):
    missing = assay("run", str(ITEMS), "--suite", "nowhere/suite.yaml", "--db", str(tmp_path / "e.db"), cwd=tmp_path)
    assert missing.returncode == 2 and "no such suite file" in missing.stderr
    bad = write_suite(tmp_path / "mine", threshold=7)
    invalid = assay("run", str(ITEMS), "--suite", str(bad), "--db", str(tmp_path / "e.db"), cwd=tmp_path)
    assert invalid.returncode == 2 and "threshold" in invalid.stderr
    assert "Traceback" not in missing.stderr + invalid.stderr


def test_push_registers_a_suite_through_the_api_and_again_is_unchanged(clean_db, tmp_path):
    body = yaml.safe_load(write_suite(tmp_path / "mine").read_text())
    body.pop("judge")
    body["components"].pop("llm_grading")
    body["components"]["semantic_similarity"]["weight"] = 0.5
    body["threshold"] = 0.6
    path = tmp_path / "pushed.json"
    path.write_text(json.dumps(body))
    with api_process() as url:
        args = ("suite", "push", str(path), "--api-url", url, "--api-key", API_KEY)
        first = assay(*args, cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert "suite my_kql: version 1" in first.stderr
        again = assay(*args, cwd=tmp_path)
        assert again.returncode == 0 and "unchanged (version 1)" in again.stderr
        assert again.stdout == first.stdout  # the criteria hash
        refused = assay("suite", "push", str(write_suite(tmp_path / "other")), "--api-url", url, "--api-key", API_KEY)
        assert refused.returncode == 2 and "error 422" in refused.stderr and "${VAR}" in refused.stderr
