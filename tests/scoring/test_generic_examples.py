"""The example suites shipped under examples/generic/: each is valid, its rubrics are laid out
cache-first, and each runs embedded with ``assay run FILE --suite PATH`` (the judge skipped without a
key, as for every suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assay.scoring.judge.prompt import OUTPUT_SCHEMA, PLACEHOLDER
from assay.scoring.judge.rubrics import fixed_text_after_first_placeholder
from assay.scoring.suites.criteria import load_suite_file
from tests.cli.test_run_embedded import embedded_env
from tests.conftest import REPO

EXAMPLES = REPO / "examples" / "generic"
CONFIG = REPO / "config"
# Suite file -> the items file it runs on.
RUNS = {
    "correctness.yaml": "correctness.jsonl",
    "faithfulness.yaml": "rag.jsonl",
    "relevance.yaml": "relevance.jsonl",
    "instruction_following.yaml": "instructions.jsonl",
    "jury.yaml": "correctness.jsonl",
}
# Only short section labels ("### Output") may follow the first per-item placeholder.
MAX_FIXED_AFTER_ITEM = 200


def test_every_example_suite_is_listed_with_its_items() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(RUNS)
    for items in RUNS.values():
        assert (EXAMPLES / items).is_file()


def _rubric_components(path: Path) -> list[tuple[str, str, str]]:
    suite = load_suite_file(path, CONFIG)
    found = []
    for name in suite.criteria.judge_components:
        judge = suite.criteria.components[name].judge
        if not isinstance(judge, bool):
            found.append((name, judge.rubric, judge.template))
    return found


@pytest.mark.parametrize("suite_file", sorted(RUNS))
def test_every_shipped_rubric_is_cache_first(suite_file: str) -> None:
    rubrics = _rubric_components(EXAMPLES / suite_file)
    assert rubrics, f"{suite_file} ships no rubric judge"
    for name, rubric, template in rubrics:
        first_item = next(m for m in PLACEHOLDER.finditer(template) if m.group(1) != OUTPUT_SCHEMA)
        fixed = template[: first_item.start()]
        # The rubric and the output schema are in the cached prefix, before any item text.
        assert rubric.strip() in fixed, name
        assert "{{" + OUTPUT_SCHEMA + "}}" in fixed, name
        after = fixed_text_after_first_placeholder(template)
        assert "{{" + OUTPUT_SCHEMA + "}}" not in after, name
        assert len(after.strip()) <= MAX_FIXED_AFTER_ITEM, f"{name}: fixed text after the item: {after!r}"


def _run(suite_file: str, tmp_path: Path) -> dict[str, dict]:
    out = tmp_path / "results.jsonl"
    command = [
        sys.executable, "-m", "assay.cli", "run", str(EXAMPLES / RUNS[suite_file]),
        "--suite", str(EXAMPLES / suite_file), "--db", str(tmp_path / "e.db"), "--out", str(out), "--no-live",
    ]
    done = subprocess.run(command, check=False, env=embedded_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {row["external_id"]: row for row in rows}


def _scores(row: dict) -> dict[str, tuple[str, float | None]]:
    return {name: (c["status"], c["score"]) for name, c in row["components"].items()}


def _judge_skipped(rows: dict[str, dict], component: str) -> None:
    for row in rows.values():
        assert row["status"] == "completed"
        assert row["partial"] is True
        judge = row["components"][component]
        assert judge["status"] == "skipped"
        assert judge["reason"] == "no Anthropic API key is configured: the judge was not run"


def test_correctness_example_runs_with_its_field_mapping(tmp_path: Path) -> None:
    rows = _run("correctness.yaml", tmp_path)
    assert set(rows) == {"101", "102", "103"}  # integer ticket numbers mapped to ids
    _judge_skipped(rows, "correctness")
    assert _scores(rows["101"])["exact"] == ("ok", 1.0)
    assert _scores(rows["103"])["exact"] == ("ok", 0.0)
    assert rows["101"]["passed"] is True and rows["103"]["passed"] is False


def test_faithfulness_example_blocks_an_answer_without_citations(tmp_path: Path) -> None:
    rows = _run("faithfulness.yaml", tmp_path)
    _judge_skipped(rows, "faithfulness")
    assert _scores(rows["rag-1"])["cites_passages"] == ("ok", 1.0)
    assert _scores(rows["rag-3"])["cites_passages"] == ("ok", 0.0)
    assert rows["rag-3"]["passed"] is False
    assert rows["rag-3"]["error_message"] == "cites_passages: score 0.00 is below its min_score 1.00"


def test_relevance_example_runs(tmp_path: Path) -> None:
    rows = _run("relevance.yaml", tmp_path)
    assert set(rows) == {"rel-1", "rel-2", "rel-3"}
    _judge_skipped(rows, "relevance")
    assert all(_scores(row)["not_a_refusal"] == ("ok", 1.0) for row in rows.values())


def test_instruction_following_example_checks_the_json(tmp_path: Path) -> None:
    rows = _run("instruction_following.yaml", tmp_path)
    _judge_skipped(rows, "follows_instructions")
    assert _scores(rows["ins-1"]) | {"follows_instructions": None} == {
        "valid_json": ("ok", 1.0), "shape": ("ok", 1.0), "follows_instructions": None
    }
    assert _scores(rows["ins-2"])["valid_json"] == ("ok", 1.0)  # a JSON string output is parsed
    assert _scores(rows["ins-2"])["shape"] == ("ok", 0.0)  # four tags, the schema allows three
    assert rows["ins-3"]["error_message"] == "valid_json: score 0.00 is below its min_score 1.00"
    assert rows["ins-3"]["passed"] is False


def test_jury_example_skips_its_jury_below_the_quorum_without_keys(tmp_path: Path) -> None:
    rows = _run("jury.yaml", tmp_path)
    assert set(rows) == {"101", "102", "103"}
    for row in rows.values():
        assert row["status"] == "completed" and row["partial"] is True
        jury = row["components"]["correct"]
        assert jury["status"] == "skipped"
        assert jury["reason"].startswith("jury: 0 of 3 members answered, fewer than min_members 2")
        assert row["components"]["correct@sonnet"]["status"] == "skipped"
    assert _scores(rows["101"])["close_to_reference"] == ("ok", 1.0)
