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
    report = json.loads(result.stdout)
    assert report["valid"] is False and report["criteria_hash"] is None
    assert any(problem in f"{p['where']}: {p['message']}" for p in report["problems"])
    assert "Traceback" not in result.stderr


SUPPORT_BOT = {
    "name": "support_bot",
    "kind": "generic",
    "threshold": 0.7,
    "fields": {"input": "question", "output": "answer", "expected": "gold", "metadata.product": "meta.product"},
    "components": {
        "correctness": {
            "weight": 0.6,
            "judge": {
                "rubric": "Is the answer correct for the product?",
                "prompt": "Product {{metadata.product}}\nQ: {{input}}\nA: {{output}}",
                "verdict": {"type": "score"},
            },
        },
        "close": {"weight": 0.4, "metric": "levenshtein_ratio", "version": 1, "args": {"reference": {"from": "expected"}}},
    },
}


def test_validate_reports_every_problem_at_once_in_plain_words(tmp_path):
    suite = json.loads(json.dumps(SUPPORT_BOT))
    suite["components"]["correctness"]["judge"]["prompt"] = "Product {{metadata.prodct}}\nQ: {{input}}\nA: {{output}}"
    suite["components"]["close"]["weight"] = 0.5  # 0.6 + 0.5
    suite["components"]["tone"] = {"weight": 0.1, "metric": "length_words", "version": 1, "argz": {}}
    suite["components"]["style"] = {"weight": 0.1, "metric": "no_such_metric", "version": 1}
    suite["thresold"] = 0.5
    path = tmp_path / "support_bot.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    result = assay("suite", "validate", str(path), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    problems = {p["where"]: p["message"] for p in json.loads(result.stdout)["problems"]}
    assert problems["thresold"] == "is not a setting here (did you mean threshold?)"
    assert problems["components.tone.argz"] == "is not a setting here (did you mean args?)"
    assert "unknown metric 'no_such_metric'" in problems["components.style"]
    assert "{{metadata.prodct}} is not a field of this suite's items (did you mean {{metadata.product}}?)" in problems[
        "components.correctness.judge"
    ]
    # The weights in plain words: their sum, and which to change by how much.
    assert problems["components"] == (
        "the weights add up to 1.3, not 1 (correctness 0.6 + close 0.5 + tone 0.1 + style 0.1): lower them by 0.3 "
        "in all, e.g. correctness 0.6 → 0.3"
    )
    text = " ".join(result.stderr.split())
    for wording in ("Value error", "Input should be", "Field required", "Extra inputs"):
        assert wording not in text
    assert f"{len(problems)} problem(s)" in text and "Traceback" not in text


def test_validate_with_sample_items_says_what_each_line_would_do(tmp_path):
    path = tmp_path / "support_bot.yaml"
    path.write_text(yaml.safe_dump(SUPPORT_BOT, sort_keys=False))
    items = tmp_path / "sample.jsonl"
    items.write_text(
        '{"question": "q1", "answer": "a1", "gold": "a1", "meta": {"product": "x"}}\n'
        '{"question": "q2", "answer": "a2", "meta": {"product": "y"}}\n'
        '{"question": "q3", "answer": "a3", "gold": "g", "meta": {}}\n'
        '{"answer": "a4"}\n'
        "{broken\n"
    )
    result = assay("suite", "validate", str(path), "--items", str(items), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["problems"] == [] and report["items_checked"] == 5 and report["criteria_hash"]
    found = {(f["line"], f["outcome"], f["component"]) for f in report["items"]}
    assert found == {(2, "skip", "close"), (3, "fail", "correctness"), (4, "rejected", None), (5, "rejected", None)}
    text = " ".join(result.stderr.split())
    assert "line 2: close would skip: {from: expected}: the item has no expected" in text
    assert "line 3: correctness would fail: the judge prompt uses {{metadata.product}}" in text
    assert "line 4: the line would be rejected: input (mapped from question) is not in the item" in text
    # The good lines alone: clean, exit 0 (a skip is reported, not a problem).
    items.write_text("\n".join(items.read_text().splitlines()[:2]) + "\n")
    clean = assay("suite", "validate", str(path), "--items", str(items), cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["valid"] is True and "would skip" in clean.stderr


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


def test_submit_takes_a_suite_file_and_registers_it_through_the_api(clean_db, tmp_path):
    path = tmp_path / "support_bot.yaml"
    path.write_text(yaml.safe_dump(SUPPORT_BOT, sort_keys=False))
    items = tmp_path / "answers.jsonl"
    items.write_text('{"question": "q1", "answer": "a1", "gold": "a1", "meta": {"product": "x"}}\n')
    with api_process() as url:
        env = plain_env(ASSAY_API_URL=url, ASSAY_API_KEY=API_KEY)
        first = assay("submit", str(items), "--suite", str(path), env=env, cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert "suite support_bot: version 1" in " ".join(first.stderr.split()) and "1 items accepted" in first.stderr
        again = assay("submit", str(items), "--suite", str(path), env=env, cwd=tmp_path)
        assert again.returncode == 0 and "unchanged (version 1)" in again.stderr
        status = assay("status", first.stdout.strip(), "--json", env=env, cwd=tmp_path)
        assert json.loads(status.stdout)["suite"] == "support_bot"
        missing = assay("submit", str(items), "--suite", str(tmp_path / "nope.yaml"), env=env, cwd=tmp_path)
        assert missing.returncode == 2 and "no such suite file" in missing.stderr
        # What an API suite may not use is the API's 422, before anything is uploaded.
        refused = assay("submit", str(items), "--suite", str(write_suite(tmp_path / "mine")), env=env, cwd=tmp_path)
        assert refused.returncode == 2 and "${VAR}" in refused.stderr and "accepted" not in refused.stderr
